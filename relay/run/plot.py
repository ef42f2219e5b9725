"""Plot a run's training curves from its metrics.jsonl into one PNG.

    python -m relay.run.plot runs/my-run                 # writes runs/my-run/curves.png
    python -m relay.run.plot runs/my-run/metrics.jsonl -o curves.png
    python -m relay.run.plot runs/my-run --keys reward/mean,loss/policy
    python -m relay.run.plot --timeline runs/my-run      # writes runs/my-run/timeline.png

One panel per key that the run has: reward (shaded by its std when "reward/std" exists), KL,
response length, step time and eval accuracy, or the keys given with --keys; a red dashed line marks each
step at which a health alarm began (health/fired/<rule>, and an alarm after training from summary.json:
docs/health.md). --timeline draws each role's busy and idle time along the run's wall clock instead
(relay/run/timeline.py).

A held-out point is drawn at the step whose weights it measured: an in-run evaluation logged
eval/lag_steps after that step (beside training: one_step_off / async) at the earlier step; the
evaluations before and after training (summary.json, as squares) at step 0 and at the last step.
All panels share one step range, so points measured at one step line up across panels.
"""

from __future__ import annotations

import argparse
import json
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
EVAL = "eval/"
LAG = "eval/lag_steps"  # relay/run/metric_keys.py EVAL_LAG_STEPS


def series(records: list[dict], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) where `key` has a finite value (eval keys appear only every k steps); a
    held-out value at the step whose weights it measured (eval/lag_steps before the record's)."""
    points = []
    for r in records:
        v = r.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            lag = r.get(LAG) if key.startswith(EVAL) else None
            points.append((r["step"] - int(lag or 0), float(v)))
    points.sort(key=lambda p: p[0])  # a late result lands between records logged before it
    return [s for s, _ in points], [v for _, v in points]


def read_summary(path: Path) -> dict:
    """The run's summary.json beside its metrics.jsonl; {} for a run that has none (not finished)."""
    summary = (path if path.is_dir() else path.parent) / "summary.json"
    try:
        return json.loads(summary.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def held_out_ends(summary: dict, key: str, last_step: int) -> tuple[list[int], list[float]]:
    """The evaluations around training of an eval/ key: the weights step 1 started from (after the
    supervised stage, with sft.steps; else before training) at step 0, the final weights at the last step."""
    if not key.startswith(EVAL):
        return [], []
    name = key.removeprefix(EVAL)
    start = summary.get(f"{name}_after_sft", summary.get(f"{name}_before"))
    ends = [(0, start), (last_step, summary.get(f"{name}_after"))]
    ends = [(s, float(v)) for s, v in ends if isinstance(v, (int, float)) and math.isfinite(v)]
    return [s for s, _ in ends], [v for _, v in ends]


def alarm_steps(records: list[dict], summary: dict) -> list[tuple[int, str]]:
    """(step, rule) of every alarm: each step's health/fired/<rule>, and the summary's health_alarms
    (they hold the held-out check after training too, at the last step)."""
    alarms = {(r["step"], k.removeprefix(FIRED)) for r in records for k in r if k.startswith(FIRED) and r[k]}
    alarms |= {(a["step"], a["rule"]) for a in summary.get("health_alarms", ()) if "step" in a and "rule" in a}
    return sorted(alarms)


def curves(path: str | Path, keys: list[str] | None = None):
    """The figure of the run at `path` and its panels by key (plot_run saves and closes it)."""
    import matplotlib.pyplot as plt

    path = Path(path)
    records, summary = load_metrics(path), read_summary(path)
    last_step = records[-1]["step"] if records else 0
    titles = dict(PANELS)
    wanted = keys if keys else [k for k, _ in PANELS]
    present = [k for k in wanted if series(records, k)[0] or held_out_ends(summary, k, last_step)[0]]
    if not present:
        available = sorted({k for r in records for k in r} - {"step", "time"})
        raise ValueError(f"none of {wanted} in {path}; keys there: {available}")

    ncols = 1 if len(present) == 1 else 2
    nrows = math.ceil(len(present) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(6 * ncols, 3.2 * nrows), squeeze=False)
    panels = dict(zip(present, axes.flat))
    xs: list[int] = []
    for key, ax in panels.items():
        steps, values = series(records, key)
        if steps:
            ax.plot(steps, values, marker="o" if len(steps) < 30 else None, markersize=3, gid="curve")
        if key in SHADE and steps:
            s_steps, s_values = series(records, SHADE[key])
            std = dict(zip(s_steps, s_values))
            if all(s in std for s in steps):
                lo = [v - std[s] for s, v in zip(steps, values)]
                hi = [v + std[s] for s, v in zip(steps, values)]
                ax.fill_between(steps, lo, hi, alpha=0.2, linewidth=0)
        ends, end_values = held_out_ends(summary, key, last_step)
        if ends:
            ax.plot(ends, end_values, "s", color="black", markersize=5, gid="ends", label="before / after training")
            ax.legend(fontsize=7)
        xs += steps + ends
        ax.set_title(titles.get(key, key))
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    alarms = alarm_steps(records, summary)
    for i, ax in enumerate(panels.values()):
        lines = [
            ax.axvline(step, color="red", alpha=0.6, linestyle="--", linewidth=1, gid=rule) for step, rule in alarms
        ]
        if lines and i == 0:  # named once, in the first panel, beside a legend it already has
            if (kept := ax.get_legend()) is not None:
                ax.add_artist(kept)
            named: dict = {}
            for line, (_, rule) in zip(lines, alarms):
                named.setdefault(rule, line)  # each rule once
            ax.legend(named.values(), named.keys(), fontsize=7, title="health alarms", title_fontsize=7)
    xs += [step for step, _ in alarms]
    pad = max(0.5, 0.03 * (max(xs) - min(xs)))
    for ax in panels.values():  # one step range: a point at step N sits under step N of every panel
        ax.set_xlim(min(xs) - pad, max(xs) + pad)
    for ax in list(axes.flat)[len(present) :]:
        ax.set_visible(False)
    fig.suptitle(path.name if path.is_dir() else path.parent.name)
    fig.tight_layout()
    return fig, panels


def plot_run(path: str | Path, out: str | Path | None = None, keys: list[str] | None = None) -> Path:
    """Render the curves of the run at `path` into a PNG; returns the PNG's path."""
    try:
        import matplotlib
    except ImportError as e:
        raise ImportError(NEEDS_MATPLOTLIB, name="matplotlib") from e

    matplotlib.use("Agg")  # no display on cluster heads and CI
    import matplotlib.pyplot as plt

    path = Path(path)
    fig, _ = curves(path, keys)
    if out is None:
        out = (path if path.is_dir() else path.parent) / "curves.png"
    out = Path(out)
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
