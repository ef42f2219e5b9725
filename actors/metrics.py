"""Run-tagged Ray metrics: what the driver logs each step, on the dashboard's Metrics view.

`RunMetrics(run).record(metrics)` turns one step's metrics dict (the one the loggers get) into
Ray custom metrics (`ray.util.metrics`), each tagged with `run` so several runs, or the trials
of a Tune sweep, share one cluster and one Grafana panel. Prometheus sees them with Ray's
`ray_` prefix, e.g. `ray_relay_reward_mean{run="tiny-grpo"}`, about 10 s (Ray's report
interval) after they are recorded.

Keys read from the metrics dict (absent keys are skipped, so a loop without tools or without
a queue records nothing for them):

    reward/mean, kl/mean, actor/pg_loss           gauges
    rollout/tokens_per_s                          gauge, worker="all"
    rollout/tokens_per_s/<worker>                 gauge, worker=<worker> (one per rollout worker)
    time/step_s, time/sync_s                      histograms (and gauges of the last value)
    weights/version                               gauge: the policy version after this step
    weights/staleness                             gauge; else weights/version - 1 - weights/batch_version
                                                  (batch_version: the oldest weight version in the batch)
    rollout/queue_depth                           gauge: batches generated, not yet trained on
    tools/calls_per_s (or tools/calls / time/rollout_s)   gauge
    tools/errors                                  counter (errors this step are added)
"""
from __future__ import annotations

import math

import ray
from ray.util.metrics import Counter, Gauge, Histogram

PREFIX = "relay_"
# Seconds: from a tiny CPU step (~0.1 s) to a large GPU step or a slow weight sync (minutes).
SECONDS_BOUNDARIES = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600]

# metrics-dict key -> (Prometheus name without prefix, description)
GAUGES: dict[str, tuple[str, str]] = {
    "reward/mean": ("reward_mean", "Mean reward of the step's rollout batch"),
    "kl/mean": ("kl_mean", "Mean per-token KL between policy and reference"),
    "actor/pg_loss": ("policy_loss", "Policy-gradient loss of the step's update"),
    "time/step_s": ("step_seconds_last", "Wall time of the last training step"),
    "time/sync_s": ("weight_sync_seconds_last", "Wall time of the last learner -> rollout weight sync"),
    "weights/version": ("weights_version", "Policy weight version after the step"),
    "rollout/queue_depth": ("queue_depth", "Rollout batches generated but not yet trained on"),
}
HISTOGRAMS: dict[str, tuple[str, str]] = {
    "time/step_s": ("step_seconds", "Wall time of a training step"),
    "time/sync_s": ("weight_sync_seconds", "Wall time of a learner -> rollout weight sync"),
}
TOKENS_PER_S = "rollout/tokens_per_s"


def _finite(value) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


class RunMetrics:
    """One run's Ray metrics. Create after Ray is connected; call `record` once per step."""

    def __init__(self, run_name: str):
        self.run = run_name
        tags = {"run": run_name}

        def gauge(name: str, description: str, extra_keys: tuple[str, ...] = ()) -> Gauge:
            g = Gauge(PREFIX + name, description=description, tag_keys=("run", *extra_keys))
            g.set_default_tags(tags)
            return g

        self.gauges = {key: gauge(name, desc) for key, (name, desc) in GAUGES.items()}
        self.histograms = {}
        for key, (name, desc) in HISTOGRAMS.items():
            h = Histogram(PREFIX + name, description=desc, boundaries=SECONDS_BOUNDARIES, tag_keys=("run",))
            h.set_default_tags(tags)
            self.histograms[key] = h
        self.tokens_per_s = gauge("rollout_tokens_per_s", "Generated tokens per second, per rollout worker ('all': the whole batch)", ("worker",))
        self.staleness = gauge("staleness", "Policy version the update used minus the batch's (oldest) weight version")
        self.tool_calls_per_s = gauge("tool_calls_per_s", "Tool calls per second of rollout")
        self.tool_errors = Counter(PREFIX + "tool_errors", description="Tool calls that failed (timeouts, bad calls, sandbox errors)", tag_keys=("run",))
        self.tool_errors.set_default_tags(tags)
        self.steps = Counter(PREFIX + "steps", description="Training steps finished", tag_keys=("run",))
        self.steps.set_default_tags(tags)

    def record(self, metrics: dict) -> None:
        """One step's metrics (the dict the loggers get); keys it does not know are ignored."""
        def get(key: str) -> float | None:
            return _finite(metrics[key]) if key in metrics else None

        for key, g in self.gauges.items():
            if (v := get(key)) is not None:
                g.set(v)
        for key, h in self.histograms.items():
            if (v := get(key)) is not None:
                h.observe(max(v, 0.0))
        if (v := get(TOKENS_PER_S)) is not None:
            self.tokens_per_s.set(v, tags={"worker": "all"})
        for key in metrics:
            if key.startswith(TOKENS_PER_S + "/") and (v := get(key)) is not None:
                self.tokens_per_s.set(v, tags={"worker": key[len(TOKENS_PER_S) + 1:]})
        staleness = get("weights/staleness")
        batch_version = get("weights/batch_version")
        if staleness is None and batch_version is not None and (version := get("weights/version")) is not None:
            # weights/version is the version after this step's update, so the update itself ran
            # on version - 1; a synchronous loop gives 0, one-step-off async gives 1.
            staleness = version - 1 - batch_version
        if staleness is not None:
            self.staleness.set(staleness)
        calls_per_s = get("tools/calls_per_s")
        if calls_per_s is None and (calls := get("tools/calls")) is not None and (seconds := get("time/rollout_s")):
            calls_per_s = calls / seconds
        if calls_per_s is not None:
            self.tool_calls_per_s.set(calls_per_s)
        if (errors := get("tools/errors")) is not None and errors > 0:
            self.tool_errors.inc(errors)
        self.steps.inc()


_runs: dict[str, RunMetrics] = {}


def publish(run_name: str, metrics: dict) -> None:
    """The driver's one call per step: record `metrics` under `run_name` (no-op without Ray)."""
    if not ray.is_initialized():
        return
    if run_name not in _runs:
        _runs[run_name] = RunMetrics(run_name)
    _runs[run_name].record(metrics)
