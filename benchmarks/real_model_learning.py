"""Does RL make a real pretrained model better than imitation alone? Held-out accuracy per task and
seed for the instruct model, SFT only and SFT+RL, on configs/smol_arith.yaml by default.

Each run is `python driver.py --config CONFIG run.seed=S [overrides]`, one at a time; the run's own
summary (runs/<name>/summary.json: held-out greedy accuracy on problems never trained on, before,
after the supervised stage when the config has one, and after RL, with the wall-clock second each
was measured at) is read back.

- SFT+RL is the recipe as written (full fine-tuning; `--variants lora` adds a LoRA run).
- SFT only (`--sft-only-steps 12 24 48`, configs with sft.*): the same demonstrations trained for
  each step count with no RL (training.steps=0); the best count is what RL is compared with, so
  RL is measured against imitation at its best, not a short SFT.
- Tool tasks also report tool calls, turns and tool errors per held-out episode.

`--plot FILE.png` draws held-out accuracy against wall-clock minutes, SFT only and SFT+RL, one
panel per task. `--reuse` reads the runs already in --out (named <config>-<variant>-s<seed> and
<config>-sft<steps>-s<seed>) and runs nothing.
Numbers, never assertions.

    python benchmarks/real_model_learning.py [--configs configs/smol_tool_chain.yaml ...] [--seeds 0 1 2]
        [--sft-only-steps 12 24 48] [--variants full lora] [--out DIR] [--reuse] [--plot FILE] [-- overrides]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = {
    "full": [],
    # LoRA keeps the base frozen: a higher learning rate is the usual trade (adapters start at zero).
    "lora": ["model.lora.rank=16", "model.lora.alpha=32", "training.lr=1.0e-4"],
}
EPISODE_STATS = ("tool_calls_per_episode", "turns_per_episode", "tool_errors_per_episode")


def one_run(config: str, seed: int, overrides: list[str], out: Path, name: str, reuse: bool) -> dict | None:
    """The run's summary (held-out metrics before, after SFT, after RL, and when each was taken);
    with `reuse`, the one already in `out`, or None where there is none."""
    summary = out / name / "summary.json"
    if reuse:
        return json.loads(summary.read_text()) if summary.exists() else None
    cmd = [sys.executable, "driver.py", "--config", config, f"run.seed={seed}", f"run.name={name}"]
    cmd += [f"run.output_dir={out}", "checkpoint.save_hf_model=false", *overrides]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0 or not summary.exists():
        raise SystemExit(f"{name}: no summary (exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return json.loads(summary.read_text()) | {"wall_s": time.perf_counter() - start}


def describe(r: dict, metric: str) -> str:
    """`before -> after SFT -> after` of one held-out metric (the middle one with sft.steps)."""
    values = [r.get(f"{metric}_{when}") for when in ("before", "after_sft", "after")]
    return " -> ".join(f"{v:.3f}" for v in values if v is not None)


def task_of(config: str) -> str:
    return Path(config).stem


def run_task(config: str, args, extra: list[str]) -> list[dict]:
    """Every seed's runs of one config: SFT-only at each step count, then each variant; one row per seed."""
    rows = []
    for seed in args.seeds:
        row = {"task": task_of(config), "seed": seed, "sft_only": {}, "runs": {}}
        for steps in args.sft_only_steps:
            name = f"{task_of(config)}-sft{steps}-s{seed}"
            r = one_run(config, seed, [f"sft.steps={steps}", "training.steps=0", *extra], args.out, name, args.reuse)
            if r is None:
                continue
            row["sft_only"][steps] = r
            print(
                f"{task_of(config)} seed {seed}: SFT only, {steps} steps: held-out {describe(r, 'accuracy')}",
                flush=True,
            )
        for variant in args.variants:
            name = f"{task_of(config)}-{variant}-s{seed}"
            r = one_run(config, seed, [*VARIANTS[variant], *extra], args.out, name, args.reuse)
            if r is None:
                continue
            row["runs"][variant] = r
            metric = "accuracy" if "accuracy_after" in r else "success_rate"
            stats = "; ".join(f"{k.replace('_', ' ')} {describe(r, k)}" for k in EPISODE_STATS if f"{k}_after" in r)
            start = r.get(f"{metric}_after_sft", r[f"{metric}_before"])  # RL's own share
            print(
                f"{task_of(config)} seed {seed} {variant}: held-out {metric} {describe(r, metric)}"
                f" ({r[f'{metric}_after'] - start:+.3f} in RL){'; ' + stats if stats else ''}; "
                f"training reward {r['reward_start']:.3f} -> {r['reward_end']:.3f}; "
                f"{r.get('wall_s', r.get('seconds_after', float('nan'))):.0f} s",
                flush=True,
            )
        rows.append(row)
    return rows


def report(rows: list[dict], variant: str) -> None:
    """Per task: SFT+RL against the best SFT-only count, per seed and as a mean."""
    for task in dict.fromkeys(r["task"] for r in rows):
        gains = []
        for row in (r for r in rows if r["task"] == task and variant in r["runs"]):
            rl = row["runs"][variant]
            sft_only = [r["accuracy_after_sft"] for r in row["sft_only"].values()] + [
                rl.get("accuracy_after_sft", float("nan"))
            ]
            best = max((v for v in sft_only if v == v), default=float("nan"))
            gains.append(rl["accuracy_after"] - best)
            print(
                f"{task} seed {row['seed']}: instruct {rl.get('accuracy_before', float('nan')):.3f}, "
                f"best SFT only {best:.3f}, SFT+RL {rl['accuracy_after']:.3f} ({gains[-1]:+.3f})"
            )
        if gains:
            spread = statistics.stdev(gains) if len(gains) > 1 else float("nan")
            print(
                f"{task} {variant}: SFT+RL minus best SFT only, mean {statistics.fmean(gains):+.3f} (sd {spread:.3f}, {len(gains)} seeds)"
            )


def in_run_points(r: dict) -> list[tuple[float, float]]:
    """(seconds from the run's start, held-out accuracy) of each in-run evaluation before the last
    (`training.eval_every`). A step's record is written after its evaluation, so the last record's
    time is the summary's `seconds_after`, and each earlier one is placed back from it."""
    metrics = Path(r["run_dir"]) / "metrics.jsonl"
    if not metrics.is_file():
        return []
    records = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    if not records or "eval/accuracy" not in records[-1]:
        return []
    end = records[-1]["time"]
    return [(r["seconds_after"] - (end - m["time"]), m["eval/accuracy"]) for m in records[:-1] if "eval/accuracy" in m]


def plot(rows: list[dict], variant: str, path: Path) -> None:
    """Held-out accuracy against wall-clock minutes: SFT-only runs and SFT+RL, one panel per task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(dict.fromkeys(r["task"] for r in rows))
    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 3.6), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for row in (r for r in rows if r["task"] == task):
            points = [(row["runs"][variant], "SFT+RL", "tab:red")] if variant in row["runs"] else []
            points += [(r, "SFT only", "tab:blue") for r in row["sft_only"].values()]
            for r, label, color in points:
                when = [w for w in ("before", "after_sft", "after") if f"seconds_{w}" in r and f"accuracy_{w}" in r]
                curve = sorted([(r[f"seconds_{w}"], r[f"accuracy_{w}"]) for w in when] + in_run_points(r))
                xs, ys = zip(*curve) if curve else ((), ())
                ax.plot([x / 60 for x in xs], ys, "o-", color=color, alpha=0.7, label=label)
        handles = {h.get_label(): h for h in ax.get_lines()}
        ax.legend(handles.values(), handles.keys(), loc="upper left")
        ax.set(title=task, xlabel="wall-clock minutes (2 CPU cores)", ylabel="held-out accuracy", ylim=(-0.02, 1.02))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", "--config", nargs="+", default=["configs/smol_arith.yaml"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument(
        "--sft-only-steps", type=int, nargs="*", default=[], help="SFT-only step counts (configs with sft.*)"
    )
    ap.add_argument("--variants", nargs="+", default=["full"], choices=list(VARIANTS))
    ap.add_argument("--model", help="model.path override (a folder, a .gguf, or a short name)")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "real-model-learning")
    ap.add_argument("--reuse", action="store_true", help="read the runs already in --out; run nothing")
    ap.add_argument("--plot", type=Path, help="write held-out accuracy against wall-clock time here (.png)")
    ap.add_argument("overrides", nargs="*", help="extra key=value overrides for every run")
    args = ap.parse_args()
    extra = [*args.overrides, *([f"model.path={args.model}"] if args.model else [])]
    rows = [row for config in args.configs for row in run_task(config, args, extra)]
    for variant in args.variants:
        report(rows, variant)
    if args.plot:
        plot(rows, args.variants[0], args.plot)


if __name__ == "__main__":
    main()
