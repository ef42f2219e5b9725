"""What a step measures in the driver: its phases' seconds (PhaseTimer), its rollout calls' metrics
merged, and held-out results as metrics (pure: no ray)."""

from __future__ import annotations

import statistics
import time
from contextlib import contextmanager

from relay.config import TaskConfig
from relay.run import metric_keys as keys
from relay.run.metric_keys import phase_seconds, phase_start


class PhaseTimer:
    """One step's phases: their seconds (time/<phase>_s) and, to draw them along the run's wall
    clock (relay.run.timeline), where each began: seconds after the timer was made (the step's
    start, whose unix time is `started_at`)."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.starts: dict[str, float] = {}
        self.origin, self.started_at = time.perf_counter(), time.time()

    @contextmanager
    def __call__(self, phase: str):
        start = time.perf_counter()
        self.starts.setdefault(phase_start(phase), start - self.origin)  # a repeated phase: its first start
        yield
        key = phase_seconds(phase)
        self.seconds[key] = self.seconds.get(key, 0.0) + time.perf_counter() - start

    def elapsed(self) -> float:
        return time.perf_counter() - self.origin

    def timeline(self) -> dict[str, float]:
        """The keys that place the step's phases on the wall clock."""
        return {keys.STEP_START_AT: self.started_at, **self.starts}


def split(items: list, parts: int) -> list[list]:
    size = len(items) // parts
    return [items[i * size : (i + 1) * size] for i in range(parts)]


def merge_rollout_metrics(per_call: list[dict[str, float]]) -> dict[str, float]:
    """One step's rollout metrics from its rollout calls' (each: a shard on worker "rollout/worker").
    Tokens/s: all tokens over the busiest worker's seconds; agent/*: means; tool counts: sums;
    idle seconds: per worker."""
    if not per_call:
        return {}
    busy: dict[int, float] = {}
    for i, m in enumerate(per_call):
        worker = int(m.get("rollout/worker", i))
        busy[worker] = busy.get(worker, 0.0) + m["rollout/seconds"]
    tokens = sum(m["rollout/tokens"] for m in per_call)
    per_worker = {
        f"{keys.TOKENS_PER_S}/{int(m.get('rollout/worker', i))}": m["rollout/tokens_per_s"]
        for i, m in enumerate(per_call)
    }
    agent = {k: sum(m[k] for m in per_call) / len(per_call) for k in per_call[0] if k.startswith("agent/")}
    tools = {k: sum(m[k] for m in per_call) for k in keys.TOOL_COUNTS if k in per_call[0]}
    idle = {}
    if "rollout/idle_s" in per_call[0]:
        idle[keys.ROLLOUT_IDLE_S] = sum(m["rollout/idle_s"] for m in per_call) / len(busy)
    return {
        **busy_spans(per_call),
        keys.TOKENS_PER_S: tokens / max(max(busy.values()), 1e-9),
        keys.REWARD_S: max(m.get("rollout/reward_seconds", 0.0) for m in per_call),  # scoring in the workers
        "rollout/tokens": float(tokens),
        **per_worker,
        **agent,
        **tools,
        **idle,
    }


# Spans closer than this are one: a stream's groups follow each other with only the hand-over
# between them, which no picture of a step can show, and each span costs two metric keys.
SPAN_GAP_S = 0.05


def busy_spans(per_call: list[dict[str, float]]) -> dict[str, float]:
    """Each rollout worker's busy spans (generation and scoring) from its calls' or groups' wall
    stamps, joined where they touch: the timeline's rollout bars (keys.rollout_span)."""
    stamps: dict[int, list[tuple[float, float]]] = {}
    for i, m in enumerate(per_call):
        if "rollout/started_at" in m:
            worker = int(m.get("rollout/worker", i))
            stamps.setdefault(worker, []).append((m["rollout/started_at"], m["rollout/ended_at"]))
    out = {}
    for worker, calls in stamps.items():
        joined: list[list[float]] = []
        for start, end in sorted(calls):
            if joined and start - joined[-1][1] < SPAN_GAP_S:
                joined[-1][1] = max(joined[-1][1], end)
            else:
                joined.append([start, end])
        for n, (start, end) in enumerate(joined):
            out[keys.rollout_span(worker, n, "start")] = start
            out[keys.rollout_span(worker, n, "end")] = end
    return out


def eval_metrics(task: TaskConfig, rewards: list[float]) -> dict[str, float]:
    """Held-out results: the share of episodes whose reward reaches task.success_threshold (accuracy;
    for environment tasks, success rate, next to the mean return)."""
    solved = sum(r >= task.success_threshold for r in rewards) / max(len(rewards), 1)
    if task.env is None:
        return {"eval/accuracy": solved}
    return {"eval/success_rate": solved, "eval/mean_return": statistics.fmean(rewards) if rewards else 0.0}
