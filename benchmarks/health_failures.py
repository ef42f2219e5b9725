"""Constructed failures on the tiny CPU model: when the health monitor fires, against when held-out
accuracy starts to fall (docs/health.md, "What it catches, measured").

    python benchmarks/health_failures.py [--cases loophole,tool_outage] [--out runs/health-failures] [--reuse]

Each case is one `driver.py` run with in-run held-out evaluations (training.eval_every), its
broken part from benchmarks/health_failure_parts.py:

  loophole     the default task (2-digit addition): the default run (60 steps) teaches the tiny
               model to carry; its final model is then trained on a reward whose checker works the
               sum out with a carry bug, so it pays the slip the model still makes on some samples;
               held-out rows are graded by the exact check. (From the warm start itself the bug
               changes nothing held out: greedy answers already make the slip.)
  tool_outage  configs/math_tool.yaml with its python tool replaced by a calculator that fails
               every call after the first RELAY_FLAKY_TOOL_CALLS (held-out evaluations' included)

It reads each run's metrics.jsonl and summary.json and prints: the first alarm's step and rule,
the first held-out evaluation at least --fall below the best one before it (the evaluation before
training included), and the lead time (fall step - alarm step; positive: the alarm came first).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from relay.envs.arithmetic import make_rows  # noqa: E402

PARTS = "benchmarks.health_failure_parts"
EVAL_KEYS = ("eval/accuracy", "eval/success_rate")


def addition_files(folder: Path) -> list[str]:
    """The default task's rows as files: held-out rows (the 256 the arithmetic task holds out for
    run.seed 0) with their answers, training rows without (the loophole's checker computes them)."""
    folder.mkdir(parents=True, exist_ok=True)
    held_out = make_rows(256, 7_919, 2)
    asked = {r["prompt"] for r in held_out}
    train = [r for r in make_rows(5_000, 0, 2) if r["prompt"] not in asked]
    (folder / "train.jsonl").write_text(
        "".join(json.dumps({"prompt": r["prompt"], "ground_truth": None}) + "\n" for r in train)
    )
    (folder / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in held_out))
    return ["task.name=custom", f"task.train_file={folder / 'train.jsonl'}", f"task.eval_file={folder / 'eval.jsonl'}"]


def loophole(out: Path) -> tuple[list[str], dict[str, str]]:
    base = run_driver("loophole-base", out, ["checkpoint.every=0"], {})
    args = [
        *addition_files(out / "loophole-data"),
        f"model.path={base / 'final_model'}",
        f"task.reward_fn={PARTS}:carry_slip_reward",
        "training.steps=30",
        "training.eval_every=2",
    ]
    return args, {}


def tool_outage(out: Path) -> tuple[list[str], dict[str, str]]:
    # 128 held-out calls before training, about 128 a step and 128 an evaluation: the tool goes
    # down during step 8
    args = [
        "--config",
        "configs/math_tool.yaml",
        f"tools.functions=[{PARTS}:python]",
        "training.steps=20",
        "training.eval_every=2",
    ]
    return args, {"RELAY_FLAKY_TOOL_CALLS": "1500"}


CASES = {"loophole": loophole, "tool_outage": tool_outage}


def run_case(name: str, out: Path) -> Path:
    args, env = CASES[name](out)
    return run_driver(name, out, args, env)


def run_driver(name: str, out: Path, args: list[str], env: dict[str, str]) -> Path:
    cmd = [sys.executable, "driver.py", *args, f"run.name={name}", f"run.output_dir={out}"]
    print("$", " ".join(cmd), flush=True)
    out.mkdir(parents=True, exist_ok=True)
    log = out / f"{name}.log"
    with log.open("w") as f:
        rc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, **env}, stdout=f, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        sys.exit(f"{name}: driver.py exited {rc}; see {log}")
    return out / name


def read_run(run: Path) -> tuple[list[tuple[int, float]], list[dict]]:
    """The held-out points [(step, value)], the one before training as step 0, and the alarms."""
    summary = json.loads((run / "summary.json").read_text())
    by_step: dict[int, dict] = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            by_step[int(record["step"])] = record  # a step logged again: the later record
    points = []
    for key in EVAL_KEYS:
        name = key.removeprefix("eval/")
        if f"{name}_before" in summary:
            points = [(0, summary[f"{name}_before"])]
            points += [(s, r[key]) for s, r in sorted(by_step.items()) if key in r]
            points.append((max(by_step), summary[f"{name}_after"]))
            break
    return points, summary.get("health_alarms", [])


def first_fall(points: list[tuple[int, float]], margin: float) -> int | None:
    best = points[0][1]
    for step, value in points[1:]:
        if value <= best - margin:
            return step
        best = max(best, value)
    return None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "health-failures")
    p.add_argument("--fall", type=float, default=0.02, help="held-out drop that counts as a fall")
    p.add_argument("--reuse", action="store_true", help="read the runs already in --out; run none")
    a = p.parse_args()
    a.out = a.out.resolve()
    rows = []
    for name in a.cases.split(","):
        run = a.out / name if a.reuse else run_case(name, a.out)
        points, alarms = read_run(run)
        fall = first_fall(points, a.fall)
        first = min((x["step"] for x in alarms), default=None)
        rules = sorted({x["rule"] for x in alarms if x["step"] == first})
        print(f"{name}: held-out " + ", ".join(f"{s}:{v:.3f}" for s, v in points))
        for x in alarms:
            print(f"{name}: alarm step {x['step']} {x['rule']} ({x['value']:.3g})")
        lead = "-" if first is None or fall is None else str(fall - first)
        rows.append((name, f"{first} {'+'.join(rules)}" if first is not None else "none", str(fall), lead))
    head = ("case", "first alarm (step rule)", "held-out falls at step", "lead (steps)")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]
    for r in [head, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
