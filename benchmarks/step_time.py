"""Step time split by phase, generated tokens/s, weight-sync seconds and resident memory per
process (the driver, each actor by role, Ray's own processes: benchmarks/process_memory.py), for
a config (default: the tiny CPU run). Prints tables; numbers, never assertions.

    python benchmarks/step_time.py [--config configs/default.yaml] [--steps 10] [key=value ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ray  # noqa: E402

from benchmarks.process_memory import memory_table, run_memory  # noqa: E402
from relay.config import load_config  # noqa: E402
from relay_trainer import loop  # noqa: E402

PHASES = ("rollout", "reward", "reference", "update", "sync", "step")  # reward: inside rollout


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="configs/default.yaml")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    out = tempfile.mkdtemp(prefix="relay-bench-")
    cfg = load_config(
        args.config,
        [
            f"training.steps={args.steps}",
            f"run.output_dir={out}",
            "checkpoint.save_hf_model=false",
            "logging.console=false",
            *args.overrides,
        ],
    )
    history, memory = [], []

    def report(step: int, metrics: dict) -> None:
        history.append(metrics)
        if step == args.steps:  # actors are alive until train() returns
            memory.extend(run_memory())

    loop.train(cfg, report=report)
    steady = history[1:] or history  # step 1 pays one-off warm-up costs
    print(
        f"\n{args.config}: {args.steps} steps, {cfg.training.prompts_per_step}x{cfg.rollout.n} samples/step, engine={cfg.rollout.engine}"
    )
    print(f"{'phase':<12}{'median s':>10}{'share':>8}")
    step_s = statistics.median(m["time/step_s"] for m in steady)
    for phase in PHASES:
        s = statistics.median(m.get(f"time/{phase}_s", 0.0) for m in steady)
        print(f"{phase:<12}{s:>10.3f}{s / step_s:>8.0%}")
    print(f"generated tokens/s (rollout phase): {statistics.median(m['rollout/tokens_per_s'] for m in steady):,.0f}")
    print(f"weight-sync seconds: {statistics.median(m['time/sync_s'] for m in steady):.4f}")
    print(f"end-to-end samples/s: {cfg.training.prompts_per_step * cfg.rollout.n / step_s:,.1f}")
    print(f"\nmemory after the last step (a local Ray: its processes descend from this one)\n{memory_table(memory)}")
    ray.shutdown()


if __name__ == "__main__":
    main()
