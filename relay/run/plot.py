"""Plot a run's training curves from its metrics.jsonl into one PNG.

    python -m relay.run.plot runs/my-run                 # writes runs/my-run/curves.png
    python -m relay.run.plot runs/my-run/metrics.jsonl -o curves.png
    python -m relay.run.plot runs/my-run --keys reward/mean,loss/policy
    python -m relay.run.plot --timeline runs/my-run      # writes runs/my-run/timeline.png

One panel per key that the run has: reward (shaded by its std when "reward/std" exists), KL,
response length, step time and eval accuracy, or the keys given with --keys; a red dashed line marks each
step at which a health alarm began (health/fired/<rule>, docs/health.md). --timeline draws
each role's busy and idle time along the run's wall clock instead (relay/run/timeline.py).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from relay.run.metrics_file import load_metrics
from relay.run.timeline import NEEDS_MATPLOTLIB

# (key, panel title); a panel is drawn only when the run logged its key.
PANELS: tuple[tuple[str, str], ...] = (
    ("reward/mean", "reward (mean)"),
    ("kl/mean", "KL to reference (mean)"),
    ("response/length_mean", "response length (tokens, mean)"),
    ("time/step_s", "step time (s)"),
    ("eval/accuracy", "eval accuracy"),
    ("eval/success_rate", "eval success rate"),
    ("eval/mean_return", "eval mean return"),
)
SHADE = {"reward/mean": "reward/std"}
FIRED = "health/fired/"  # relay/run/metric_keys.py health_fired


def series(records: list[dict], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) where `key` has a finite value (eval keys appear only every k steps)."""
    steps, values = [], []
    for r in records:
        v = r.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            steps.append(r["step"])
            values.append(float(v))
    return steps, values


def plot_run(path: str | Path, out: str | Path | None = None, keys: list[str] | None = None) -> Path:
    """Render the curves of the run at `path` into a PNG; returns the PNG's path."""
    try:
        import matplotlib
    except ImportError as e:
        raise ImportError(NEEDS_MATPLOTLIB, name="matplotlib") from e

    matplotlib.use("Agg")  # no display on cluster heads and CI
    import matplotlib.pyplot as plt

    path = Path(path)
    records = load_metrics(path)
    titles = dict(PANELS)
    wanted = keys if keys else [k for k, _ in PANELS]
    present = [k for k in wanted if series(records, k)[0]]
    if not present:
        available = sorted({k for r in records for k in r} - {"step", "time"})
        raise ValueError(f"none of {wanted} in {path}; keys there: {available}")

    if out is None:
        out = (path if path.is_dir() else path.parent) / "curves.png"
    out = Path(out)
    ncols = 1 if len(present) == 1 else 2
    nrows = math.ceil(len(present) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(6 * ncols, 3.2 * nrows), squeeze=False)
    for ax, key in zip(axes.flat, present):
        steps, values = series(records, key)
        ax.plot(steps, values, marker="o" if len(steps) < 30 else None, markersize=3)
        if key in SHADE:
            s_steps, s_values = series(records, SHADE[key])
            std = dict(zip(s_steps, s_values))
            if all(s in std for s in steps):
                lo = [v - std[s] for s, v in zip(steps, values)]
                hi = [v + std[s] for s, v in zip(steps, values)]
                ax.fill_between(steps, lo, hi, alpha=0.2, linewidth=0)
        ax.set_title(titles.get(key, key))
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    alarms = [(r["step"], k.removeprefix(FIRED)) for r in records for k in r if k.startswith(FIRED) and r[k]]
    for i, ax in enumerate(list(axes.flat)[: len(present)]):
        for step, rule in alarms:  # named once, in the first panel
            ax.axvline(step, color="red", alpha=0.6, linestyle="--", linewidth=1, label=None if i else rule)
        if alarms and i == 0:
            ax.legend(fontsize=7, title="health alarms", title_fontsize=7)
    for ax in list(axes.flat)[len(present) :]:
        ax.set_visible(False)
    fig.suptitle(path.name if path.is_dir() else path.parent.name)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m relay.run.plot", description=__doc__.split("\n")[0])
    parser.add_argument("run", help="a run folder (holding metrics.jsonl) or a metrics.jsonl")
    parser.add_argument("-o", "--out", help="PNG to write (default: <run folder>/curves.png, or timeline.png)")
    parser.add_argument("--keys", help="comma-separated metric keys to plot instead of the defaults")
    parser.add_argument(
        "--timeline", action="store_true", help="each role's busy and idle time along the wall clock instead"
    )
    args = parser.parse_args(argv)
    if args.timeline and args.keys:
        parser.error("--keys chooses curves; --timeline draws the phase times")
    keys = [k.strip() for k in args.keys.split(",") if k.strip()] if args.keys else None
    try:
        if args.timeline:
            from relay.run.timeline import plot_timeline

            out = plot_timeline(args.run, args.out)
        else:
            out = plot_run(args.run, args.out, keys)
    except FileNotFoundError as e:
        print(f"relay.run.plot: {e.filename or e}: no such file (a run folder holds metrics.jsonl)", file=sys.stderr)
        return 1
    except ImportError as e:
        if e.name != "matplotlib":
            raise
        print(NEEDS_MATPLOTLIB, file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"relay.run.plot: {e}", file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
