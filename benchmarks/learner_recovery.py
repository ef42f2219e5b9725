"""What restoring a lost learner in place costs (relay_trainer/learner_recovery.py).

    python benchmarks/learner_recovery.py [--steps 8] [--rounds 3] [--kill-step 4]

(a) Recovery: a run of the default task whose learner is killed (SIGKILL of its own process) in
    the update of step `kill-step`, checkpoint.every=0 (so every earlier update is replayed). The
    learner writes the moment it dies; the driver's report of that step is the moment the step
    goes on (its update redone, its weights synced). Printed: that span, the restore's own part
    (the checkpoint's state and the replayed updates, from its log line) and the rest, which is
    mostly Ray restarting the actor (its constructor loads the model).
(b) Seconds per step with and without the kept inputs (resources.learner_restores=3, the default,
    against 0), runs of the default task alternated `rounds` times; the median over every step but
    the first of each run, and the median of the runs' medians.
(c) What the kept inputs hold: bytes per update (the samples and logprobs, pickled; object refs
    resolved), and at most over the run (checkpoint.every=0: every update is kept).
(d) The driver's own added work per step when nothing fails (the phases' wrappers and the keep),
    timed on stand-ins: a machine shared with other work hides it in (b). `--overhead-only`: (d) alone.
Numbers, never assertions.
"""

from __future__ import annotations

import argparse
import os
import pickle
import re
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ray  # noqa: E402

import driver  # noqa: E402
from relay_trainer import learner_recovery, loop  # noqa: E402


def argv(out: str, name: str, steps: int, restores: int) -> list[str]:
    return [
        f"run.output_dir={out}",
        f"run.name={name}",
        f"training.steps={steps}",
        "training.eval_before=false",
        "task.num_eval_rows=16",
        "checkpoint.every=0",
        "checkpoint.save_hf_model=false",
        "logging.console=false",
        f"resources.learner_restores={restores}",
    ]


def kill_in_loss(stamp: str):
    def patch(self):
        def loss(micro):
            Path(stamp).write_text(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)

        self._actor._loss = loss

    return patch


def run(out: str, name: str, steps: int, restores: int, on_step=None) -> list[dict]:
    reported, original = [], loop.train

    def report(step, metrics):
        reported.append({**metrics, "reported_at": time.time()})
        if on_step is not None:
            on_step(step, name)

    loop.train = lambda cfg, resume: original(cfg, resume, report=report)
    try:
        assert driver.main(argv(out, name, steps, restores)) == 0
    finally:
        loop.train = original
    return reported


def kept_bytes(args: tuple, kwargs: dict) -> int:
    """The kept arguments pickled, each object ref replaced by its value (what it pins in the store)."""
    resolve = lambda v: ray.get(v) if isinstance(v, ray.ObjectRef) else v  # noqa: E731
    return len(pickle.dumps(([resolve(a) for a in args], {k: resolve(v) for k, v in kwargs.items()})))


def wrapper_seconds(n: int = 100_000) -> float:
    """One step's wrapped phases (logprobs, update, sync, and a checkpoint's) and its keep, around no-ops."""
    from types import SimpleNamespace

    actors = SimpleNamespace(learner=SimpleNamespace(_actor_id=b"learner"), faults=SimpleNamespace(restorable=set()))
    recovery, kwargs = learner_recovery.LearnerRecovery(actors, 3, "bench"), {"step": [], "kl_coef": 0.0}
    start = time.perf_counter()
    for _ in range(n):
        for what in ("logprobs", "update", "weight sync", "checkpoint"):
            recovery.run(dict, what)
        recovery.keep(**kwargs)
        if len(recovery.kept) > 100:
            recovery.kept.clear()
    return (time.perf_counter() - start) / n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--kill-step", type=int, default=4)
    p.add_argument("--overhead-only", action="store_true")
    args = p.parse_args()
    print(f"(d) driver work added per step: {wrapper_seconds() * 1e6:.1f} us (4 phases wrapped, 1 update kept)")
    if args.overhead_only:
        return
    out = tempfile.mkdtemp(prefix="relay-learner-recovery-")

    # (c) and (a): one run with the kept inputs measured, killed in step kill-step's update
    sizes, keep = [], learner_recovery.LearnerRecovery.keep

    def measuring_keep(self, *a, **k):
        keep(self, *a, **k)
        if self.enabled:
            sizes.append((kept_bytes(a, k), len(self.kept)))

    learner_recovery.LearnerRecovery.keep = measuring_keep
    stamp = str(Path(out) / "killed_at")

    def kill(step, name):
        if step == args.kill_step - 1:
            learner = ray.get_actor(f"{name}/learner-0", namespace="relay")
            ray.get(learner.__ray_call__.remote(kill_in_loss(stamp)))

    lines: list[str] = []
    log = learner_recovery.LearnerRecovery.log

    def tee(self, line):
        lines.append(line)
        log(self, line)

    learner_recovery.LearnerRecovery.log = tee
    try:
        killed = run(out, "killed", args.steps, 3, kill)
    finally:
        learner_recovery.LearnerRecovery.log = log
        learner_recovery.LearnerRecovery.keep = keep
    died = float(Path(stamp).read_text())
    went_on = killed[args.kill_step - 1]["reported_at"]
    restore = next(float(m.group(1)) for line in lines if (m := re.search(r"replayed updates in ([\d.]+) s", line)))
    step_s = statistics.median(m["time/step_s"] for m in killed if m["faults/learner_restores"] == 0)
    print(f"(a) recovery: {went_on - died:.1f} s from the learner's death in step {args.kill_step}'s update to")
    print(
        f"    the step's report ({args.kill_step - 1} updates replayed from the run's start): restore {restore:.1f} s,"
    )
    print(f"    the rest (Ray's restart, the model load, the redone update and sync) {went_on - died - restore:.1f} s;")
    print(f"    an undisturbed step takes {step_s:.2f} s (median)")

    # (b) alternated: with the kept inputs (learner_restores=3) and without (0)
    per_run: dict[int, list[float]] = {3: [], 0: []}
    every_step: dict[int, list[float]] = {3: [], 0: []}
    for r in range(args.rounds):
        for restores in (3, 0) if r % 2 == 0 else (0, 3):
            steps = [m["time/step_s"] for m in run(out, f"speed-{r}-{restores}", args.steps, restores)[1:]]
            per_run[restores].append(statistics.median(steps))
            every_step[restores] += steps
    for restores, label in ((3, "with kept inputs   "), (0, "without (restores=0)")):
        runs = ", ".join(f"{s:.3f}" for s in per_run[restores])
        print(
            f"(b) {label}: {statistics.median(every_step[restores]):.3f} s/step (median of "
            f"{len(every_step[restores])} steps; per run {runs})"
        )
    per_update = statistics.median(b for b, _ in sizes)
    most = max(b * n for b, n in sizes)
    print(
        f"(c) kept inputs: {per_update / 1024:.1f} KiB per update, at most {most / 1024:.1f} KiB over {len(sizes)} updates"
    )


if __name__ == "__main__":
    main()
