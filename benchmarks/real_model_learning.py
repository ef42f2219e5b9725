"""Does relay make a real pretrained model better at a task? Held-out accuracy before and after,
over several seeds, for full fine-tuning and LoRA, on configs/smol_arith.yaml by default.

Each run is `python driver.py --config CONFIG run.seed=S [variant overrides]`, one at a time; the
run's own summary (runs/<name>/summary.json: held-out greedy accuracy on problems never trained on,
before, after the supervised stage when the config has one, and after RL; with tools, tool calls per
episode too) is read back. Prints per-seed numbers, the mean change and its spread across seeds.
Numbers, never assertions.

    python benchmarks/real_model_learning.py [--config configs/smol_arith.yaml] [--seeds 0 1 2]
        [--variants full lora] [--model PATH] [--out DIR] [-- extra overrides]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = {
    "full": [],
    # LoRA keeps the base frozen: a higher learning rate is the usual trade (adapters start at zero).
    "lora": ["model.lora.rank=16", "model.lora.alpha=32", "training.lr=1.0e-4"],
}


def one_run(config: str, seed: int, overrides: list[str], out: Path, name: str) -> dict:
    """The run's summary (runs/<name>/summary.json: held-out metrics before, after SFT, after RL) and its wall time."""
    cmd = [sys.executable, "driver.py", "--config", config, f"run.seed={seed}", f"run.name={name}"]
    cmd += [f"run.output_dir={out}", "checkpoint.save_hf_model=false", *overrides]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    summary = out / name / "summary.json"
    if proc.returncode != 0 or not summary.exists():
        raise SystemExit(f"{name}: no summary (exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return json.loads(summary.read_text()) | {"wall_s": wall}


def describe(r: dict, metric: str) -> str:
    """`before -> after SFT -> after` of one held-out metric (the middle one with sft.steps)."""
    values = [r.get(f"{metric}_{when}") for when in ("before", "after_sft", "after")]
    return " -> ".join(f"{v:.3f}" for v in values if v is not None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/smol_arith.yaml")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--model", help="model.path override (a folder, a .gguf, or a short name)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("overrides", nargs="*", help="extra key=value overrides for every run")
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="relay-real-model-"))
    extra = [*args.overrides, *([f"model.path={args.model}"] if args.model else [])]
    for variant in args.variants:
        changes = []
        for seed in args.seeds:
            r = one_run(args.config, seed, [*VARIANTS[variant], *extra], out, f"{variant}-s{seed}")
            metric = "accuracy" if "accuracy_after" in r else "success_rate"
            changes.append(r[f"{metric}_after"] - r[f"{metric}_before"])
            tools = (
                f"; tool calls per episode {describe(r, 'tool_calls_per_episode')}"
                if "tool_calls_per_episode_after" in r
                else ""
            )
            print(
                f"{variant} seed {seed}: held-out {metric} {describe(r, metric)} ({changes[-1]:+.3f}){tools}; "
                f"training reward {r['reward_start']:.3f} -> {r['reward_end']:.3f}; {r['wall_s']:.0f} s",
                flush=True,
            )
        spread = statistics.stdev(changes) if len(changes) > 1 else float("nan")
        print(f"{variant}: mean change {statistics.fmean(changes):+.3f} (sd {spread:.3f}, {len(changes)} seeds)")


if __name__ == "__main__":
    main()
