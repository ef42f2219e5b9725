"""The colocated worker's step (resources.colocate: one module generates and trains) against the
separate RolloutWorker + Learner (the trained weights copied into the engine's model), both in this
one process, no Ray: what colocation saves in compute alone. The two alternate step by step, each
on its own copy of the same prompt stream; prints median wall and CPU seconds per step.

    python benchmarks/colocate_step.py [--steps 60] [--prompts 2] [key=value ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from relay.config.role_settings import ColocatedSettings, PolicySettings, RolloutSettings

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--prompts", type=int, default=2, help="prompts per step (rollout.n samples each)")
    ap.add_argument("overrides", nargs="*")
    a = ap.parse_args()
    import torch

    from actors.colocated import ColocatedWorker
    from actors.learner import Learner
    from actors.rollout import RolloutWorker
    from relay.algos.advantages import compute_advantages
    from relay.config import load_config
    from relay.envs.data import PromptIterator
    from relay.run.model_source import resolve_model_path
    from relay.run.rows import task_rows
    from relay.types import Batch

    torch.set_num_threads(1)
    overrides = [f"training.prompts_per_step={a.prompts}", "rollout.max_new_tokens=8", *a.overrides]
    cfg = load_config(None, [*overrides, "resources.colocate=true"])
    path = resolve_model_path(cfg.model, cfg.task, cfg.tools, cfg.critic, cfg.reward_model)
    rows = task_rows(cfg.task, cfg.tools, cfg.run.seed)[0]
    colocated = ColocatedWorker(ColocatedSettings.of(cfg), path, 1)
    worker, learner = RolloutWorker(RolloutSettings.of(cfg), path, 0, 1), Learner(PolicySettings.of(cfg), path, 1)
    prompts = {"colocated": PromptIterator(rows, 0), "separate": PromptIterator(rows, 0)}

    def step(kind: str, i: int) -> None:
        rollout = colocated.rollout if kind == "colocated" else worker.rollout
        samples, _ = rollout(prompts[kind].take(a.prompts), i, 0)
        batch = Batch.from_samples(samples, pad_id=0)
        batch.advantages, batch.returns = compute_advantages(
            cfg.algorithm.estimator, rewards=batch.rewards, loss_mask=batch.loss_mask, group_ids=batch.group_ids
        )
        if kind == "colocated":
            colocated.update(batch)  # tags the engine's weights: the colocated sync
        else:
            learner.update(batch)
            worker.engine.update_weights(learner.model.state_dict(), i + 1)

    wall: dict[str, list[float]] = {"colocated": [], "separate": []}
    cpu: dict[str, list[float]] = {"colocated": [], "separate": []}
    for i in range(a.steps):
        for kind in ("colocated", "separate") if i % 2 else ("separate", "colocated"):
            start, start_cpu = time.perf_counter(), time.process_time()
            step(kind, i)
            wall[kind].append(time.perf_counter() - start)
            cpu[kind].append(time.process_time() - start_cpu)
    skip = min(5, a.steps - 1)  # warm-up
    print(f"{a.steps} steps each, {a.prompts}x{cfg.rollout.n} samples, alternated; medians after {skip} steps")
    for kind in wall:
        w, c = statistics.median(wall[kind][skip:]), statistics.median(cpu[kind][skip:])
        print(f"{kind:<10} wall {w:.4f} s/step   cpu {c:.4f} s/step")


if __name__ == "__main__":
    main()
