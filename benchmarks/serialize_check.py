"""What the rollout worker's serialize check (actors/serializable.py: the Samples pickled before the
rollout returns) costs per step, against the rollout it follows. The default task (tiny model),
one RolloutWorker in this process, no Ray; each step's samples are checked 20 times for a median.

    python benchmarks/serialize_check.py [--steps 10] [key=value ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("overrides", nargs="*")
    a = ap.parse_args()
    import torch

    from actors.rollout import RolloutWorker
    from actors.serializable import unpicklable
    from relay.config import load_config
    from relay.config.role_settings import RolloutSettings
    from relay.envs.data import PromptIterator
    from relay.run.model_source import resolve_model_path
    from relay.run.rows import task_rows

    torch.set_num_threads(1)
    cfg = load_config(None, a.overrides)
    path = resolve_model_path(cfg.model, cfg.task, cfg.tools, cfg.critic, cfg.reward_model)
    rows = task_rows(cfg.task, cfg.tools, cfg.run.seed)[0]
    worker, prompts = RolloutWorker(RolloutSettings.of(cfg), path, 0, 1), PromptIterator(rows, 0)
    rollout_s, check_s, n = [], [], 0
    for step in range(a.steps):
        batch = prompts.take(cfg.training.prompts_per_step)
        t0 = time.perf_counter()
        samples, _ = worker.rollout(batch, step, 0)  # the check included, once
        rollout_s.append(time.perf_counter() - t0)
        runs = []
        for _ in range(20):
            t0 = time.perf_counter()
            assert unpicklable(samples) == []
            runs.append(time.perf_counter() - t0)
        check_s.append(statistics.median(runs))
        n = len(samples)
    r, c = statistics.median(rollout_s), statistics.median(check_s)
    print(
        f"serialize check: {c * 1e3:.3f} ms per step ({n} samples, {c / n * 1e6:.1f} us each); "
        f"rollout {r * 1e3:.0f} ms per step; the check is {c / r:.2%} of it (medians of {a.steps} steps)"
    )


if __name__ == "__main__":
    main()
