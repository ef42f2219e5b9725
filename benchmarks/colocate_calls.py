"""A colocated sync step as one actor call (`rollout_and_update`, what the driver makes of a plain
step) against two (`rollout`, then `update` with the samples back through the driver), in one Ray
session on one ColocatedWorker actor, alternated in blocks of 15 steps. Prints the median wall
seconds per step of each as the driver sees it, and the part the actor itself spent computing.

    python benchmarks/colocate_calls.py [--prompts 2] [--blocks 14] [key=value ...]

The default setting is the tiny default task at 8 new tokens; benchmarks/peer_trl.py's is
`--peer-trl` (its model, plain prompts; built and cached by that script on first use).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

BLOCK = 15  # steps of one way before switching to the other


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=2, help="prompts per step (rollout.n samples each)")
    ap.add_argument("--blocks", type=int, default=14, help="blocks of 15 steps per way; the first 2 are warm-up")
    ap.add_argument("--peer-trl", action="store_true", help="benchmarks/peer_trl.py's model and prompts")
    ap.add_argument("overrides", nargs="*")
    a = ap.parse_args()
    import ray

    from actors.colocated import ColocatedWorker
    from relay.config import load_config
    from relay.config.role_settings import ColocatedSettings
    from relay.envs.data import PromptIterator
    from relay.envs.scoring import trainable
    from relay.run.model_source import resolve_model_path
    from relay.run.rows import task_rows
    from relay_trainer.pools import loopback_node

    setting = [f"training.prompts_per_step={a.prompts}", "rollout.max_new_tokens=8"]
    if a.peer_trl:
        from benchmarks.peer_trl import CACHE, addition_rows, relay_setting, tiny_plain_model, write_data

        setting = relay_setting(tiny_plain_model(addition_rows()[0]), CACHE / "data", a.prompts)
        write_data([a.prompts], 1, 1)
    cfg = load_config(None, [*setting, *a.overrides, "resources.colocate=true"])
    with loopback_node():  # serves this machine only, as the driver's own Ray does
        ray.init(runtime_env={"env_vars": {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}}, include_dashboard=False)

    @ray.remote(num_cpus=0)
    class TimedColocatedWorker(ColocatedWorker):
        def timed_rollout(self, rows, step):
            start = time.perf_counter()
            samples, metrics = self.rollout(rows, step, first_group_id=0)
            return samples, metrics, time.perf_counter() - start

        def timed_update(self, samples):
            start = time.perf_counter()
            self.update(trainable(samples), kl_coef=0.0)
            return time.perf_counter() - start

    path = resolve_model_path(cfg.model, cfg.task, cfg.tools, cfg.critic, cfg.reward_model)
    worker = TimedColocatedWorker.remote(ColocatedSettings.of(cfg), path, 1)
    prompts = PromptIterator(task_rows(cfg.task, cfg.tools, cfg.run.seed)[0], cfg.run.seed)

    def two_calls(step: int) -> float:
        samples, _, rolled = ray.get(worker.timed_rollout.remote(prompts.take(a.prompts), step))
        return rolled + ray.get(worker.timed_update.remote(samples))

    def one_call(step: int) -> float:
        _, _, _, seconds = ray.get(worker.rollout_and_update.remote(prompts.take(a.prompts), step, 0.0))
        return sum(seconds.values())

    wall: dict[str, list[float]] = {"two calls": [], "one call": []}
    inside: dict[str, list[float]] = {"two calls": [], "one call": []}
    step = 0
    for block in range(a.blocks):
        for name, way in (("two calls", two_calls), ("one call", one_call)):
            for _ in range(BLOCK):
                start = time.perf_counter()
                computed = way(step)
                if block >= 2:
                    wall[name].append(time.perf_counter() - start)
                    inside[name].append(computed)
                step += 1
    print(f"{a.prompts}x{cfg.rollout.n}, {len(wall['one call'])} steps each, alternated in blocks of {BLOCK}; medians")
    print("| step | wall s/step | computing in the actor |\n|---|---|---|")
    for name in wall:
        print(f"| {name} | {statistics.median(wall[name]):.4f} | {statistics.median(inside[name]):.4f} |")
    ray.shutdown()


if __name__ == "__main__":
    main()
