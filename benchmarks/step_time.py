"""Step time split by phase, generated tokens/s, weight-sync seconds and peak memory per actor,
for a config (default: the tiny CPU run). Prints a table; numbers, never assertions.

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

import driver  # noqa: E402
from relay.config import load_config  # noqa: E402

RELAY_ACTORS = {"RolloutWorker", "Learner", "Reference", "Critic", "EnvPool", "ToolExecutor"}
PHASES = ("rollout", "reward", "reference", "update", "sync", "step")


def peak_rss_mb(pid: int) -> float:
    """VmHWM: the process's peak resident memory (actors run on this machine in a local run)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def actor_peak_memory() -> dict[str, float]:
    """Ray titles actor processes `ray::<Class>...`; read each one's peak RSS (no dashboard needed)."""
    found: dict[str, float] = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            title = (proc / "cmdline").read_bytes().split(b"\0")[0].decode()
            name = title[5:].split(".")[0].split(":")[0] if title.startswith("ray::") else ""
            if name in RELAY_ACTORS:
                found[f"{name} (pid {proc.name})"] = peak_rss_mb(int(proc.name))
        except (OSError, ValueError):
            continue
    return found


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
    history, memory = [], {}

    def report(step: int, metrics: dict) -> None:
        history.append(metrics)
        if step == args.steps:  # actors are alive until train() returns
            memory.update(actor_peak_memory())

    driver.train(cfg, report=report)
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
    print("peak memory per actor (MB): " + ", ".join(f"{k} {v:,.0f}" for k, v in sorted(memory.items())))
    print(f"driver peak memory (MB): {peak_rss_mb(__import__('os').getpid()):,.0f}")
    ray.shutdown()


if __name__ == "__main__":
    main()
