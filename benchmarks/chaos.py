"""Chaos: training goes on while rollout workers, environment pools and tool executors die and hang.

    python benchmarks/chaos.py [--tasks default tool] [--steps 12] [--every 3] [--mode sync|async] [--seed 0]
    python benchmarks/chaos.py --matrix [--points P ...] [--kinds K ...] [--modes M ...] [--layouts L ...]

Per task, an undisturbed run, then the same run (same seeds) while, every `every` steps, a fault
hits a restartable role (each role in turn) at a random one of its fault points
(relay/fault_points.py), in the next step: `ray.kill` (restart allowed) and SIGKILL of its
process in turn; the first fault of the run is a hang (SIGSTOP of the process), which only the
call deadline finds. `--seed` picks the points and seeds both runs. One line per run: steps
completed, faults injected, restarts (Ray's count for the run's actors), shards and calls redone,
deadlines that fired, duplicated samples and lost steps (both must be 0), and the final held-out accuracy next
to the undisturbed run's. Since a redone shard samples exactly what the lost call would have
(same seed, same weights), the chaos run's rewards should equal the undisturbed run's step for
step: `same rewards` says whether they did. Numbers, never assertions.

`--mode async` runs both with training.mode=async (max_staleness 1): there the faults hit calls
queued on the workers while the learner trains, a hung worker is found by the producer's
per-worker deadline, and duplicated samples also counts a group trained at two steps. Rewards
depend on timing in async mode, so `same rewards` is not printed.

`--matrix` runs the fault matrix instead (benchmarks/fault_matrix.py): one short run per cell
(fault point x kind x training.mode x layout x weight transport, filtered by the options), all
seeded `--seed`, one line per cell, then the passed counts by mode and layout. Kind `node`
(`--kinds node`) is a whole node lost at the point, each cell on a two-raylet cluster of its own
(benchmarks/fault_matrix_nodes.py).

default: configs/default.yaml (2-digit addition), 2 rollout workers, 2 env pools.
tool:    configs/math_tool.yaml (sandboxed Python tool calls, environment steps), 2 rollout
         workers, 2 env pools, 2 tool executors (needs bubblewrap for the sandbox).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ray  # noqa: E402

from relay.config import load_config  # noqa: E402
from relay.fault_points import disarm  # noqa: E402
from relay_trainer import loop  # noqa: E402
from relay_trainer import steps as driver_steps  # noqa: E402
from relay_trainer.fault_arming import arm_run  # noqa: E402
from relay_trainer.producer import RolloutProducer  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TASKS = {
    "default": ("configs/default.yaml", ["training.prompts_per_step=8", "rollout.n=8", "task.num_eval_rows=64"]),
    "tool": (
        "configs/math_tool.yaml",
        ["training.prompts_per_step=8", "rollout.n=4", "task.num_eval_rows=32", "tools.executors.count=2"],
    ),
}
COMMON = [
    "resources.rollout.count=2",
    "resources.env.count=2",
    "resources.max_restarts=-1",
    "resources.call_timeout_s=15",  # short, so the hang is found within the run; far above a healthy call here
    "resources.rollout_timeout_s=180",  # also the wait for a restart: minutes on a loaded 2-core machine
    "checkpoint.every=0",
    "checkpoint.save_hf_model=false",
    "logging.console=false",
]
ROLES = ("rollout", "env", "tools")


# The fault points of each restartable role (relay/fault_points.py); the tool task's rewards are
# computed in its environment pools, the default task's in its rollout workers.
ROLE_POINTS = {
    "rollout": ("rollout.generate", "weights.load.shared_memory"),
    "env": ("env.reset", "env.step", "reward.function"),
    "tools": ("tool.call",),
}
TASK_ROLES = {"default": ("rollout",), "tool": ROLES}


def run_actors(run_name: str) -> list[dict]:
    """The run's restartable actors as Ray's GCS lists them (name, pid, state, restarts)."""
    from ray._private import state  # the GCS actor table: pids and restart counts without the dashboard

    table = state.state.actor_table(None).values()
    return [a for a in table if a["Name"].startswith(f"{run_name}/") and a["Name"].split("/")[1].startswith(ROLES)]


class Chaos:
    """Every `every` steps, arms one fault at a random point of the next role in turn: it happens
    at the first call of the next step to reach that point (in whichever actor gets there first),
    so it always lands inside a step, however short the steps are."""

    def __init__(self, run_name: str, task: str, every: int, rng: random.Random, token_dir: Path):
        self.run_name, self.roles, self.every, self.rng = run_name, TASK_ROLES[task], every, rng
        self.token_dir, self.armed = token_dir, []

    def after_step(self, step: int, steps: int) -> None:
        if not (self.every and step % self.every == 0 and step < steps):
            return
        n = len(self.armed)
        role = self.roles[n % len(self.roles)]
        point = self.rng.choice(ROLE_POINTS[role])
        kind = "hang" if not n else ("ray_kill", "sigkill")[n % 2]
        token = arm_run(self.run_name, point, kind, self.token_dir, slow_s=0.0)
        print(f"chaos: {kind} at {point} ({role}), armed after step {step}", flush=True)
        self.armed.append((kind, token))

    @property
    def faults(self) -> Counter:
        """The faults that happened (an armed point the run never reached again did not)."""
        return Counter(kind for kind, token in self.armed if token.exists())


def run(task: str, steps: int, every: int, out: Path, mode: str = "sync", seed: int = 0) -> dict:
    config, overrides = TASKS[task]
    name = f"chaos-{task}-{mode}-{'faults' if every else 'calm'}"
    pipeline = ["training.mode=async", "training.max_staleness=1"] if mode == "async" else []
    run_keys = [f"training.steps={steps}", f"run.output_dir={out}", f"run.name={name}", f"run.seed={seed}"]
    cfg = load_config(REPO / config, [*overrides, *COMMON, *pipeline, *run_keys])
    chaos = Chaos(name, task, every, random.Random(seed), out)
    rewards, optimizer_steps, faults, batches = [], 0.0, Counter(), []
    original_rollout, original_take = driver_steps.rollout, RolloutProducer.take

    def recording_rollout(actors, rows, *args, **kwargs):
        samples, metrics = original_rollout(actors, rows, *args, **kwargs)
        if not kwargs.get("greedy"):  # a training batch: each (group, index) at most once
            batches.append([(s.group_id, s.meta["episode_id"].rsplit("-", 1)[-1]) for s in samples])
        return samples, metrics

    def recording_take(producer):  # async: every group of the run at most once, over all steps
        samples, metrics = original_take(producer)
        batches.append([(s.group_id, s.meta["episode_id"].rsplit("-", 1)[-1]) for s in samples])
        return samples, metrics

    def report(step, metrics):
        nonlocal optimizer_steps
        rewards.append(metrics["reward/mean"])
        optimizer_steps += metrics.get("actor/optimizer_steps", 0.0)
        faults.update({k: v for k, v in metrics.items() if k.startswith("faults/")})
        chaos.after_step(step, steps)

    driver_steps.rollout, RolloutProducer.take = recording_rollout, recording_take
    restarts, summary = 0, {}
    try:
        summary = loop.train(cfg, report=report)
    except Exception as e:  # the run stopped: its steps so far are what the line reports
        print(f"chaos: the run stopped: {type(e).__name__}: {e}", flush=True)
    finally:
        driver_steps.rollout, RolloutProducer.take = original_rollout, original_take
        disarm()
        restarts = sum(a["NumRestarts"] for a in run_actors(name)) if ray.is_initialized() else 0
    duplicated = sum(len(keys) - len(set(keys)) for keys in batches)
    if mode == "async":  # group ids run on over the steps
        duplicated = sum(len(keys) for keys in batches) - len({k for keys in batches for k in keys})
    # held-out accuracy (single-turn tasks) or success rate (environment tasks) after training
    accuracy = summary.get("accuracy_after", summary.get("success_rate_after", float("nan")))
    return dict(
        task=task,
        steps=len(rewards),
        faults=sum(chaos.faults.values()),
        kinds=dict(chaos.faults),
        restarts=restarts,
        retried_shards=faults["faults/retried_shards"],
        retried_calls=faults["faults/retried_calls"],
        timeouts=faults["faults/timeouts"],
        duplicated=duplicated + faults["faults/duplicated_samples"],
        lost_steps=steps - len(rewards),
        optimizer_steps=optimizer_steps,
        rewards=rewards,
        accuracy=accuracy,
    )


def matrix(args) -> None:
    from benchmarks.fault_matrix import all_cells, run_cells

    chosen = dict(point=args.points, kind=args.kinds, mode=args.modes, layout=args.layouts)
    cells = [c for c in all_cells() if all(not v or getattr(c, k) in v for k, v in chosen.items())]
    print(f"chaos: {len(cells)} cells", flush=True)
    outcomes = run_cells(cells, seed=args.seed)
    table = Counter()
    for o in outcomes:
        table[(o.cell.mode, o.cell.layout, "passed")] += o.passed()
        table[(o.cell.mode, o.cell.layout, "total")] += 1
    for mode, layout in sorted({(m, lay) for m, lay, _ in table}):
        print(
            f"chaos matrix {mode}/{layout}: {table[(mode, layout, 'passed')]}/{table[(mode, layout, 'total')]} passed"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--every", type=int, default=3, help="steps between faults")
    parser.add_argument("--mode", default="sync", choices=["sync", "async"], help="training.mode of both runs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--matrix", action="store_true", help="the fault matrix, one line per cell")
    for option in ("points", "kinds", "modes", "layouts"):
        parser.add_argument(f"--{option}", nargs="*", default=[], help="--matrix: only these")
    args = parser.parse_args()
    if args.matrix:
        return matrix(args)
    with tempfile.TemporaryDirectory(prefix="relay-chaos-") as out:
        lines = []
        for task in args.tasks:
            calm = run(task, args.steps, 0, Path(out), args.mode, args.seed)
            chaos = run(task, args.steps, args.every, Path(out), args.mode, args.seed)
            same = "" if args.mode == "async" else f"same rewards {chaos['rewards'] == calm['rewards']}, "
            kinds = ", ".join(f"{k} {v}" for k, v in sorted(chaos["kinds"].items()))
            lines.append(
                f"chaos {task} ({args.mode}): steps {chaos['steps']}/{args.steps}, faults {chaos['faults']} ({kinds}), "
                f"restarts {chaos['restarts']}, retried shards {chaos['retried_shards']:g}, "
                f"retried calls {chaos['retried_calls']:g}, timeouts {chaos['timeouts']:g}, "
                f"duplicated samples {chaos['duplicated']:g}, lost steps {chaos['lost_steps']}, "
                f"optimizer steps {chaos['optimizer_steps']:g} (undisturbed {calm['optimizer_steps']:g}), "
                f"{same}held-out accuracy/success {chaos['accuracy']:.3f} "
                f"(undisturbed {calm['accuracy']:.3f})"
            )
            print(lines[-1], flush=True)
        if len(lines) > 1:
            print("\n".join(lines))


if __name__ == "__main__":
    main()
