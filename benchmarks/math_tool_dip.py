"""math_tool's greedy held-out accuracy before and after training, by seed, with what the episodes did.

    python benchmarks/math_tool_dip.py --label NAME [--seeds 0 1 2] [--rows 256] [key=value ...]
    python benchmarks/math_tool_dip.py --summary-only [--out DIR]

Each seed trains configs/math_tool.yaml (with the given overrides) in this process, one run at a
time. Every rollout is read as it comes back: the training batches (sampled at
rollout.temperature) and the greedy held-out episodes, each episode sorted by
relay.envs.math_tool.episode_outcome (copied, guessed, miscopied, wrong_code, wrong_guess,
unfinished). One
JSON line per run goes to <out>/dip.jsonl as it finishes: held-out accuracy before and after
(each with its binomial standard error over the held-out rows) and the outcome shares, and per
training step the reward and the outcome shares. The summary prints, per label, each seed's
before -> after and the mean paired difference over seeds with its standard error.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from relay.config import load_config  # noqa: E402
from relay.envs.math_tool import OUTCOMES, episode_outcome  # noqa: E402
from relay_trainer import loop, steps  # noqa: E402

QUIET = ["logging.console_every=10", "checkpoint.save_hf_model=false", "logging.samples_every=0"]


def outcome_shares(samples) -> dict[str, float]:
    """Each outcome's share of the episodes, and the share of groups whose rewards differ (the only
    ones GRPO learns from: a group of equal rewards has advantage 0)."""
    counts = Counter(episode_outcome(s) for s in samples)
    groups: dict[int, set[float]] = {}
    for s in samples:
        groups.setdefault(s.group_id, set()).add(s.reward)
    mixed = sum(len(rewards) > 1 for rewards in groups.values()) / len(groups)
    return {**{k: counts[k] / len(samples) for k in OUTCOMES}, "mixed_groups": mixed}


def one_run(label: str, seed: int, rows: int, out: Path, overrides: list[str]) -> dict:
    cfg = load_config(
        REPO / "configs/math_tool.yaml",
        [*QUIET, f"run.output_dir={out}", f"run.name=math_tool-{label}-s{seed}", f"run.seed={seed}"]
        + [f"task.num_eval_rows={rows}", *overrides],
    )
    train, held_out = [], []  # outcome shares per training batch; per held-out evaluation
    original = steps.rollout

    def reading_rollout(actors, rows, *args, **kwargs):
        samples, metrics = original(actors, rows, *args, **kwargs)
        (held_out if kwargs.get("greedy") else train).append(outcome_shares(samples))
        return samples, metrics

    steps.rollout = reading_rollout
    try:
        summary = loop.train(cfg)
    finally:
        steps.rollout = original
    records = [json.loads(line) for line in (Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    n = rows
    return {
        "label": label,
        "seed": seed,
        "overrides": overrides,
        "rows": n,
        "before": summary["success_rate_before"],
        "after": summary["success_rate_after"],
        "se_before": math.sqrt(summary["success_rate_before"] * (1 - summary["success_rate_before"]) / n),
        "se_after": math.sqrt(summary["success_rate_after"] * (1 - summary["success_rate_after"]) / n),
        "held_out_outcomes": held_out,  # before, [every eval_every steps], after
        "reward": [r["reward/mean"] for r in records],
        "tool_calls": [r.get("agent/tool_calls", math.nan) for r in records],
        "entropy": [r.get("actor/entropy", math.nan) for r in records],
        "train_outcomes": train,
        "run_dir": summary["run_dir"],
    }


def summarize(results: list[dict]) -> None:
    by_label: dict[str, list[dict]] = {}
    for r in results:
        by_label.setdefault(r["label"], []).append(r)
    for label, runs in by_label.items():
        runs.sort(key=lambda r: r["seed"])
        print(
            f"\n{label}: {' '.join(runs[0]['overrides']) or '(the config as shipped)'}; {runs[0]['rows']} held-out rows"
        )
        for r in runs:
            first, last = statistics.fmean(r["reward"][:5]), statistics.fmean(r["reward"][-5:])
            miscopied = [o["miscopied"] for o in (r["held_out_outcomes"][0], r["held_out_outcomes"][-1])]
            print(
                f"  seed {r['seed']}: held-out {r['before']:.3f} -> {r['after']:.3f} (s.e. {r['se_after']:.3f}); "
                f"miscopied {miscopied[0]:.3f} -> {miscopied[1]:.3f}; reward {first:.3f} -> {last:.3f} (first/last 5)"
            )
        diffs = [r["after"] - r["before"] for r in runs]
        mean_before = statistics.fmean(r["before"] for r in runs)
        mean_after = statistics.fmean(r["after"] for r in runs)
        se = statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else math.nan
        print(
            f"  mean {mean_before:.3f} -> {mean_after:.3f}; paired difference {statistics.fmean(diffs):+.3f} +- {se:.3f} (s.e. over seeds)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", help="key=value config overrides")
    parser.add_argument("--label", default="config", help="names the runs and groups them in the summary")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rows", type=int, default=256, help="held-out rows (task.num_eval_rows)")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "math_tool_dip")
    parser.add_argument("--summary-only", action="store_true")
    args = parser.parse_args()
    log = args.out / "dip.jsonl"
    if not args.summary_only:
        args.out.mkdir(parents=True, exist_ok=True)
        for seed in args.seeds:
            result = one_run(args.label, seed, args.rows, args.out, args.overrides)
            with log.open("a") as f:
                f.write(json.dumps(result) + "\n")
    summarize([json.loads(line) for line in log.read_text().splitlines() if line.strip()])


if __name__ == "__main__":
    main()
