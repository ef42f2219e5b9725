"""Chaos: training goes on while rollout workers, environment pools and tool executors die and hang.

    python benchmarks/chaos.py [--tasks default tool] [--steps 12] [--every 3] [--mode sync|async]

Per task, an undisturbed run, then the same run (same seeds) while, every `every` steps, a fault
hits a restartable actor (each role in turn, a random actor of it) at a random moment of the next step: `ray.kill` (restart
allowed) and SIGKILL of its process in turn; the first fault of the run is a hang (SIGSTOP of
the process), which only the call deadline finds. One line per run: steps completed, faults
injected, restarts (Ray's count for the run's actors), shards and calls redone, deadlines that
fired, duplicated samples and lost steps (both must be 0), and the final held-out accuracy next
to the undisturbed run's. Since a redone shard samples exactly what the lost call would have
(same seed, same weights), the chaos run's rewards should equal the undisturbed run's step for
step: `same rewards` says whether they did. Numbers, never assertions.

`--mode async` runs both with training.mode=async (max_staleness 1): there the faults hit calls
queued on the workers while the learner trains, a hung worker is found by the producer's
per-worker deadline, and duplicated samples also counts a group trained at two steps. Rewards
depend on timing in async mode, so `same rewards` is not printed.

default: configs/default.yaml (2-digit addition), 2 rollout workers, 2 env pools.
tool:    configs/math_tool.yaml (sandboxed Python tool calls, environment steps), 2 rollout
         workers, 2 env pools, 2 tool executors (needs bubblewrap for the sandbox).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ray  # noqa: E402

import driver  # noqa: E402
from actors import steps as driver_steps  # noqa: E402
from actors.producer import RolloutProducer  # noqa: E402
from relay.config import load_config  # noqa: E402

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


def run_actors(run_name: str) -> list[dict]:
    """The run's restartable actors as Ray's GCS lists them (name, pid, state, restarts)."""
    from ray._private import state  # the GCS actor table: pids and restart counts without the dashboard

    table = state.state.actor_table(None).values()
    return [a for a in table if a["Name"].startswith(f"{run_name}/") and a["Name"].split("/")[1].startswith(ROLES)]


def role_of(actor: dict) -> str:
    return actor["Name"].split("/")[1].rsplit("-", 1)[0]


class Chaos:
    """Injects the faults from a timer thread, so they land inside a step's calls, not between them."""

    def __init__(self, run_name: str, every: int, rng: random.Random):
        self.run_name, self.every, self.rng = run_name, every, rng
        self.faults: Counter[str] = Counter()
        self.timers: list[threading.Timer] = []

    def after_step(self, step: int, steps: int) -> None:
        if self.every and step % self.every == 0 and step < steps:
            timer = threading.Timer(self.rng.uniform(0.0, 1.5), self.inject)
            timer.start()
            self.timers.append(timer)

    def inject(self) -> None:
        alive = [a for a in run_actors(self.run_name) if a["State"] == "ALIVE" and a["Pid"]]
        if not alive:
            return
        roles = [r for r in ROLES if any(role_of(a) == r for a in alive)]
        role = roles[sum(self.faults.values()) % len(roles)]  # each role in turn; a random actor of it
        target = self.rng.choice(sorted((a for a in alive if role_of(a) == role), key=lambda a: a["Name"]))
        kind = "hang" if not self.faults else ("ray.kill", "SIGKILL")[sum(self.faults.values()) % 2]
        print(f"chaos: {kind} {target['Name']} (pid {target['Pid']})", flush=True)
        if kind == "hang":
            os.kill(target["Pid"], signal.SIGSTOP)
        elif kind == "SIGKILL":
            os.kill(target["Pid"], signal.SIGKILL)
        else:
            ray.kill(ray.get_actor(target["Name"], namespace="relay"), no_restart=False)
        self.faults[kind] += 1


def run(task: str, steps: int, every: int, out: Path, mode: str = "sync", seed: int = 0) -> dict:
    config, overrides = TASKS[task]
    name = f"chaos-{task}-{mode}-{'faults' if every else 'calm'}"
    pipeline = ["training.mode=async", "training.max_staleness=1"] if mode == "async" else []
    cfg = load_config(
        REPO / config,
        [*overrides, *COMMON, *pipeline, f"training.steps={steps}", f"run.output_dir={out}", f"run.name={name}"],
    )
    chaos = Chaos(name, every, random.Random(seed))
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
        summary = driver.train(cfg, report=report)
    except Exception as e:  # the run stopped: its steps so far are what the line reports
        print(f"chaos: the run stopped: {type(e).__name__}: {e}", flush=True)
    finally:
        driver_steps.rollout, RolloutProducer.take = original_rollout, original_take
        for timer in chaos.timers:
            timer.cancel()
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--every", type=int, default=3, help="steps between faults")
    parser.add_argument("--mode", default="sync", choices=["sync", "async"], help="training.mode of both runs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="relay-chaos-") as out:
        lines = []
        for task in args.tasks:
            calm = run(task, args.steps, 0, Path(out), args.mode)
            chaos = run(task, args.steps, args.every, Path(out), args.mode)
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
