"""relay's and TRL's seconds per step, measured with their steps taking turns.

    python benchmarks/peer_trl_turns.py [--steps 100] [--rounds 2] [--sizes 2,8] [--layouts relay,relay-separate]

benchmarks/peer_trl.py runs the contenders one after another. On these shared machines the
compute itself slows by a third or more for stretches of 10-30 steps (relay's colocated 2x8 step,
in one run: 12 ms rollout + 17 ms update, then 18 + 23 ms for 20 steps, then back), and such a
stretch lands on one contender's run and not the other's. Here TRL and relay run at once, each
in its own process as in peer_trl.py (relay with its Ray actors), on peer_trl.py's setting, and
they hand each other the machine after every step through a pair of pipes: TRL in its trainer's
step-end callback, relay in the driver's `report` hook. One token goes round, so exactly one of
them computes at any time, and a slow stretch meets both. A step's time is one turn: from getting
the turn to the end of the next step, everything its loop does in between included (the driver's
logging, TRL's callbacks), the wait for the other excluded. Each start-up runs in its first turn.
Round r runs one such pair per relay layout and size, with seed r.

Prints, per layout and size, the median seconds per step after the first 5 over every round's
steps, and relay/TRL. Start-up, memory and accuracy: peer_trl.py.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.peer_trl import (  # noqa: E402
    CACHE,
    RELAYS,
    SAMPLES,
    addition_rows,
    run_relay,
    run_trl,
    tiny_plain_model,
    trl_python,
    write_data,
)

SKIP = 5  # first steps left out of the medians: warm-up


class Turns:
    """One token between two processes: `wait` blocks until the other hands it over (or has
    finished: its end of the pipe closed), `give` hands it over, `done` gives it for good."""

    def __init__(self, read_fd: int, write_fd: int):
        self.read_fd, self.write_fd, self.other_done = read_fd, write_fd, False

    def wait(self) -> None:
        if not self.other_done:
            self.other_done = os.read(self.read_fd, 1) == b""

    def give(self) -> None:
        if self.write_fd >= 0:
            os.write(self.write_fd, b"t")

    def done(self) -> None:
        os.close(self.write_fd)
        self.write_fd = -1


def take_turns(a) -> None:
    """The child: wait for the first turn, train, and after each step hand the turn over and time
    the next one."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    turns, seconds, started = Turns(a.read_fd, a.write_fd), [], [0.0]

    def on_step() -> None:
        seconds.append(time.perf_counter() - started[0])
        turns.give()
        turns.wait()
        started[0] = time.perf_counter()

    turns.wait()
    started[0] = time.perf_counter()
    work = Path(a.work)
    if a.child == "trl":
        run_trl(a, work, on_step)
    else:
        run_relay(a, work, on_step, separate=a.child == "relay-separate")
    turns.done()
    (work / "seconds.json").write_text(json.dumps(seconds))


def paired_run(pythons: dict[str, str], layout: str, prompts: int, a, data: Path, model: Path, seed: int) -> dict:
    """TRL and one relay layout at once, taking turns; each one's seconds per step."""
    to_relay, to_trl = os.pipe(), os.pipe()  # (read, write) each
    ends = {"trl": (to_trl[0], to_relay[1]), layout: (to_relay[0], to_trl[1])}
    procs, works = {}, {}
    for contender, (read_fd, write_fd) in ends.items():
        works[contender] = Path(tempfile.mkdtemp(prefix=f"turns-{contender}-", dir=CACHE))
        cmd = [pythons[contender], __file__, "--child", contender, "--work", str(works[contender])]
        cmd += ["--data", str(data), "--model", str(model), "--steps", str(a.steps), "--prompts", str(prompts)]
        cmd += ["--seed", str(seed), "--read-fd", str(read_fd), "--write-fd", str(write_fd)]
        log = (works[contender] / "log.txt").open("w")
        env = dict(os.environ, OMP_NUM_THREADS="1")  # one torch thread per process, as in peer_trl.py
        procs[contender] = subprocess.Popen(
            cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env, pass_fds=(read_fd, write_fd)
        )
    os.write(to_trl[1], b"t")  # TRL takes the first turn
    for fd in (*to_relay, *to_trl):  # the children hold the only copies: a child's exit closes its end
        os.close(fd)
    seconds = {}
    for contender, proc in procs.items():
        if proc.wait() != 0:
            for other in procs.values():
                other.kill()
            tail = (works[contender] / "log.txt").read_text().strip().splitlines()[-15:]
            raise RuntimeError(f"{contender} failed; {works[contender] / 'log.txt'}:\n" + "\n".join(tail))
        seconds[contender] = json.loads((works[contender] / "seconds.json").read_text())
    for work in works.values():  # a failed run's folders stay, with their logs
        shutil.rmtree(work, ignore_errors=True)
    return seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=2, help="round r uses seed r")
    ap.add_argument("--sizes", default="2,8", help="prompts per step, comma-separated (8 samples each)")
    ap.add_argument("--layouts", default="relay,relay-separate", help=f"relay layouts, of {', '.join(RELAYS)}")
    ap.add_argument("--child", choices=["trl", *RELAYS], help=argparse.SUPPRESS)
    for name in ("--work", "--data", "--model"):
        ap.add_argument(name, help=argparse.SUPPRESS)
    for name in ("--prompts", "--seed", "--read-fd", "--write-fd"):
        ap.add_argument(name, type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        take_turns(a)
        return 0
    sizes, layouts = [int(s) for s in a.sizes.split(",")], a.layouts.split(",")
    if unknown := [x for x in layouts if x not in RELAYS]:
        ap.error(f"--layouts: unknown {unknown}; choose from {', '.join(RELAYS)}")
    data, model = write_data(sizes, a.steps, a.rounds), tiny_plain_model(addition_rows()[0])
    python, why = trl_python()
    if python is None:
        print(f"peer_trl_turns: TRL is not available: {why}")
        return 2
    pythons = {"trl": python, **dict.fromkeys(layouts, sys.executable)}
    steps: dict[tuple[str, int], dict[str, list[float]]] = {}
    for r in range(a.rounds):
        for layout in layouts:
            for p in sizes:
                seconds = paired_run(pythons, layout, p, a, data, model, seed=r)
                for contender, s in seconds.items():
                    steps.setdefault((layout, p), {}).setdefault(contender, []).extend(s[SKIP:])
                medians = {c: statistics.median(s[SKIP:]) for c, s in seconds.items()}
                print(f"round {r} {layout} {p}x{SAMPLES}: {json.dumps({c: round(m, 4) for c, m in medians.items()})}")
    print(f"\n{os.cpu_count()} CPUs, {a.steps} steps per run, {a.rounds} round(s), steps taking turns; medians\n")
    print("| layout | prompts x samples | TRL s/step | relay s/step | relay/TRL |\n|---|---|---|---|---|")
    for (layout, p), by in steps.items():
        trl, relay = statistics.median(by["trl"]), statistics.median(by[layout])
        print(f"| {RELAYS[layout]} | {p}x{SAMPLES} | {trl:.4f} | {relay:.4f} | {relay / trl:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
