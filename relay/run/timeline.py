"""A run's timeline: each role's busy and idle time along the run's wall clock, in one PNG.

    python -m relay.run.plot --timeline runs/my-run     # writes runs/my-run/timeline.png (-o FILE)

One row per role: each rollout worker (its calls' busy spans, generation and scoring, as the
worker stamped them), the learner (the update phase), the logprobs phase when it took time
(reference, critic, old logprobs) and the weight sync, as the driver timed them. Colour is busy,
grey is idle. With training.mode one_step_off / async a second panel shows the rollout buffer's
depth and the groups in flight when each step took its batch.

Read from metrics.jsonl: `timeline/step_start_at` (unix seconds) and `timeline/<phase>_start_s`
place each step and its phases, `time/<phase>_s` size them, and
`timeline/rollout/<worker>/<n>/{start,end}_at` are the workers' spans (relay.run.metric_keys).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from relay.run import metric_keys as keys
from relay.run.metrics_file import load_metrics

# Drawing needs matplotlib, which a plain `pip install .` leaves out (its fonts and image libraries
# are tens of MB every actor's environment would carry): the `plot` extra brings it.
NEEDS_MATPLOTLIB = "relay plot needs matplotlib: pip install 'relay[plot]' (or 'relay[loggers]')"

# (phase, row): the driver-timed phases drawn, in row order under the rollout workers
PHASE_ROWS = (("reference", "logprobs"), ("update", "learner"), ("sync", "weight sync"))
# the logprobs row only when that phase took this share of the run: in the default run it is an
# empty call (the learner finds its old logprobs in the update), a row of nothing but idle
MIN_SHARE = 0.005
SPAN_KEY = re.compile(r"^timeline/rollout/(\d+)/(\d+)/start_at$")
COLOURS = {"learner": "tab:orange", "logprobs": "tab:purple", "weight sync": "tab:green"}
ROLLOUT_COLOUR, IDLE_COLOUR = "tab:blue", "0.88"


@dataclass
class Timeline:
    rows: dict[str, list[tuple[float, float]]]  # role -> busy spans, seconds after the first step began
    steps: list[tuple[int, float, float]]  # (step, start, end), same clock
    queue: list[tuple[float, float]]  # (when the step took its batch, finished groups left in the buffer)
    in_flight: list[tuple[float, float]]  # (the same time, groups still being rolled out)

    @property
    def end(self) -> float:
        return max([end for _, _, end in self.steps] + [end for spans in self.rows.values() for _, end in spans])

    def idle_share(self, role: str) -> float:
        """The share of the run (first step's start to the last bar's end) the role was not busy."""
        end, covered, reached = self.end, 0.0, 0.0
        for start, stop in sorted(self.rows[role]):  # the union: spans may overlap
            start, stop = max(start, reached, 0.0), min(stop, end)
            covered += max(0.0, stop - start)
            reached = max(reached, stop)
        return 1.0 - covered / end if end > 0 else 0.0


def _number(record: dict, key: str) -> float | None:
    v = record.get(key)
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


def build_timeline(records: list[dict], where: str = "metrics.jsonl") -> Timeline:
    """The bars of the records' steps; a ValueError naming the keys when none can be placed."""
    placed = [r for r in records if _number(r, keys.STEP_START_AT) is not None and _number(r, keys.STEP_S) is not None]
    if not placed:
        raise ValueError(
            f"{where} has no step with {keys.STEP_START_AT} and {keys.STEP_S}, which place the timeline: "
            "it was written by a relay that did not record them; a new run does"
        )
    origin = _number(placed[0], keys.STEP_START_AT)
    steps, queue, in_flight = [], [], []
    rows: dict[str, list[tuple[float, float]]] = {}
    workers: dict[int, list[tuple[float, float]]] = {}
    for r in placed:
        start = _number(r, keys.STEP_START_AT) - origin
        steps.append((int(r["step"]), start, start + _number(r, keys.STEP_S)))
        for phase, row in PHASE_ROWS:
            offset, seconds = _number(r, keys.phase_start(phase)), _number(r, keys.phase_seconds(phase))
            if offset is not None and seconds is not None:
                rows.setdefault(row, []).append((start + offset, start + offset + seconds))
        for key in r:
            if match := SPAN_KEY.match(key):
                worker, n = int(match[1]), int(match[2])
                begin, stop = _number(r, key), _number(r, keys.rollout_span(worker, n, "end"))
                if begin is not None and stop is not None:
                    workers.setdefault(worker, []).append((begin - origin, stop - origin))
        depth = _number(r, keys.QUEUE_DEPTH)
        if depth is not None:  # the step took its batch when its rollout phase (its wait for one) ended
            took = (_number(r, keys.phase_start("rollout")) or 0.0) + (_number(r, keys.ROLLOUT_S) or 0.0)
            queue.append((start + took, depth))
            if (flying := _number(r, keys.IN_FLIGHT)) is not None:
                in_flight.append((start + took, flying))
    if not rows.get("learner"):
        raise ValueError(f"{where} has no {keys.phase_start('update')} with {keys.UPDATE_S}: no learner bar to draw")
    wall = steps[-1][2] - steps[0][1]
    logprobs = rows.pop("logprobs", [])
    if sum(stop - start for start, stop in logprobs) > MIN_SHARE * wall:
        rows["logprobs"] = logprobs
    ordered = {f"rollout {w}": sorted(workers[w]) for w in sorted(workers)}
    ordered.update((row, rows[row]) for _, row in PHASE_ROWS if row in rows)
    return Timeline(ordered, steps, queue, in_flight)


def plot_timeline(path: str | Path, out: str | Path | None = None) -> Path:
    """Draw the timeline of the run at `path` (a run folder or its metrics.jsonl); returns the PNG's path."""
    try:
        import matplotlib
    except ImportError as e:
        raise ImportError(NEEDS_MATPLOTLIB, name="matplotlib") from e

    matplotlib.use("Agg")  # no display on cluster heads and CI
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    path = Path(path)
    folder = path if path.is_dir() else path.parent
    timeline = build_timeline(load_metrics(path), str(path / "metrics.jsonl" if path.is_dir() else path))
    out = Path(out) if out is not None else folder / "timeline.png"

    roles = list(timeline.rows)
    height = 1.4 + 0.5 * len(roles) + (1.3 if timeline.queue else 0.0)
    ratios = [len(roles) + 1, 2] if timeline.queue else [1]
    fig, axes = plt.subplots(
        len(ratios), 1, figsize=(10, height), sharex=True, squeeze=False, gridspec_kw={"height_ratios": ratios}
    )
    ax, end = axes[0][0], timeline.end
    for y, role in enumerate(roles):
        ax.broken_barh([(0.0, end)], (y - 0.35, 0.7), color=IDLE_COLOUR)
        bars = [(start, stop - start) for start, stop in timeline.rows[role]]
        ax.broken_barh(bars, (y - 0.35, 0.7), color=COLOURS.get(role, ROLLOUT_COLOUR))
    ax.set_yticks(range(len(roles)), [f"{role}\nidle {timeline.idle_share(role):.0%}" for role in roles], fontsize=8)
    ax.set_ylim(len(roles) - 0.4, -0.9)  # first row on top; room above it for the step numbers
    every = max(1, math.ceil(len(timeline.steps) / 25))  # a label per step would overlap on long runs
    for i, (step, start, _) in enumerate(timeline.steps):
        ax.axvline(start, color="0.3", linewidth=0.6, zorder=3)  # over the bars: back-to-back steps stay apart
        if i % every == 0:
            ax.text(start, -0.55, str(step), fontsize=7, color="0.3", va="center")
    ax.set_xlim(0.0, end * 1.01)
    first, last = timeline.steps[0][0], timeline.steps[-1][0]
    ax.set_title(
        f"{folder.name}: steps {first}-{last}, busy (colour) and idle (grey) time; lines: step starts", fontsize=10
    )
    if timeline.queue:
        q = axes[1][0]
        times, depths = zip(*timeline.queue)
        q.step(
            times, depths, where="post", marker="o", markersize=3, color=ROLLOUT_COLOUR, label="finished, in the buffer"
        )
        if timeline.in_flight:
            times, flying = zip(*timeline.in_flight)
            q.step(times, flying, where="post", linestyle="--", color="0.4", label="in flight")
        q.legend(fontsize=7, loc="center left", ncols=2)
        q.set_ylabel("groups", fontsize=8)
        q.set_ylim(bottom=0)
        q.yaxis.set_major_locator(MaxNLocator(integer=True))  # whole groups
        q.grid(alpha=0.3)
    axes[-1][0].set_xlabel(f"seconds since step {first} began")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out
