"""Run-tagged Ray metrics: what the driver logs each step, on the dashboard's Metrics view.

`RunMetrics(run).record(metrics)` turns one step's metrics dict (the one the loggers get) into
Ray custom metrics (`ray.util.metrics`), each tagged with `run` so several runs, or the trials
of a Tune sweep, share one cluster and one Grafana panel. Prometheus sees them with Ray's
`ray_` prefix, e.g. `ray_relay_reward_mean{run="tiny-grpo"}`, about 10 s (Ray's report
interval) after they are recorded.

Keys read from the metrics dict (relay/run/metric_keys.py names them for the code that writes them
and for this module; absent keys are skipped, so a run without tools records nothing for them):

    reward/mean, reward/std, kl/mean, actor/pg_loss  gauges (kl/mean: runs with a reference policy)
    rollout/tokens_per_s                            gauge, worker="all"
    rollout/tokens_per_s/<worker>                   gauge, worker=<worker> (one per rollout worker)
    time/step_s, time/sync_s                        histograms (and gauges of the last value)
    weights/version, weights/staleness              gauges
    rollout/queue_depth, rollout/in_flight          gauges: the async pipeline's buffer (training.mode
                                                    one_step_off / async; a sync run has no buffer)
    tools/calls / time/rollout_s                    gauge: tool calls per second of the rollout phase
    tools/errors                                    counter (errors this step are added)
    rm/score_mean, rm/rule_reward_mean, rm/seconds  gauges (runs with reward_model.path: RM_ONLY)
    rm/errors                                       counter
    health/alarms                                   gauge: health rules tripped at the step (relay/health/)
    health/<rule>                                   gauge health_value, rule=<rule>: the value the rule measured
"""

from __future__ import annotations

import math

import ray
from ray.util.metrics import Counter, Gauge, Histogram

from relay.config.health import RULES
from relay.run import metric_keys as keys

PREFIX = "relay_"
# Seconds: from a tiny CPU step (~0.1 s) to a large GPU step or a slow weight sync (minutes).
SECONDS_BOUNDARIES = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600]

# Every Ray metric of a run: name without prefix -> (kind, description, tag keys besides "run").
METRICS: dict[str, tuple[type, str, tuple[str, ...]]] = {
    "reward_mean": (Gauge, "Mean reward of the step's rollout batch", ()),
    "reward_std": (Gauge, "Standard deviation of the rewards of the step's rollout batch", ()),
    "kl_mean": (Gauge, "Mean per-token KL between policy and reference", ()),
    "policy_loss": (Gauge, "Policy-gradient loss of the step's update", ()),
    "rollout_tokens_per_s": (
        Gauge,
        "Generated tokens per second, per rollout worker ('all': the whole batch)",
        ("worker",),
    ),
    "step_seconds": (Histogram, "Wall time of a training step", ()),
    "step_seconds_last": (Gauge, "Wall time of the last training step", ()),
    "weight_sync_seconds": (Histogram, "Wall time of a learner -> rollout weight sync", ()),
    "weight_sync_seconds_last": (Gauge, "Wall time of the last learner -> rollout weight sync", ()),
    "weights_version": (Gauge, "Policy weight version after the step", ()),
    "staleness": (Gauge, "Policy version the update used minus the batch's (oldest) weight version", ()),
    "queue_depth": (Gauge, "Finished groups waiting in the async pipeline's buffer after the step took its batch", ()),
    "groups_in_flight": (Gauge, "Groups being rolled out when the step took its batch (async pipeline)", ()),
    "tool_calls_per_s": (Gauge, "Tool calls per second of rollout", ()),
    "tool_errors": (Counter, "Tool calls that failed (timeouts, bad calls, sandbox errors)", ()),
    "steps": (Counter, "Training steps finished", ()),
    "rm_score_mean": (Gauge, "Mean reward-model score of the step's batch (before normalisation)", ()),
    "rm_rule_reward_mean": (
        Gauge,
        "Mean rule reward of the same batch: flat while rm_score_mean climbs is hacking",
        (),
    ),
    "rm_errors": (Counter, "Samples the reward model could not score", ()),
    "rm_seconds": (Gauge, "Wall time of the step's reward-model scoring", ()),
    "health_alarms": (Gauge, "Health rules tripped at the step: reward hacking or collapse (docs/health.md)", ()),
    "health_value": (Gauge, "The value each health rule measured at the step (docs/health.md)", ("rule",)),
}
# Recorded only by runs with a rollout buffer (training.mode one_step_off / async).
PIPELINE_METRICS = frozenset({"queue_depth", "groups_in_flight"})
RM_ONLY = frozenset({"rm_score_mean", "rm_rule_reward_mean", "rm_errors", "rm_seconds"})  # reward_model.path set
# metrics-dict key -> the metrics that record its value as it is
AS_IS: dict[str, tuple[str, ...]] = {
    keys.REWARD_MEAN: ("reward_mean",),
    keys.REWARD_STD: ("reward_std",),
    keys.KL_MEAN: ("kl_mean",),
    keys.POLICY_LOSS: ("policy_loss",),
    keys.STEP_S: ("step_seconds", "step_seconds_last"),
    keys.SYNC_S: ("weight_sync_seconds", "weight_sync_seconds_last"),
    keys.WEIGHTS_VERSION: ("weights_version",),
    keys.STALENESS: ("staleness",),
    keys.QUEUE_DEPTH: ("queue_depth",),
    keys.IN_FLIGHT: ("groups_in_flight",),
    keys.TOOL_ERRORS: ("tool_errors",),
    keys.RM_SCORE_MEAN: ("rm_score_mean",),
    keys.RM_RULE_REWARD_MEAN: ("rm_rule_reward_mean",),
    keys.RM_ERRORS: ("rm_errors",),
    keys.RM_SECONDS: ("rm_seconds",),
    keys.HEALTH_ALARMS: ("health_alarms",),
}


def _finite(value) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def readings(metrics: dict) -> list[tuple[str, float, dict[str, str]]]:
    """(metric name, value, tags besides "run") for everything one step's metrics dict records;
    keys it does not know and values that are not finite numbers are left out."""

    def get(key: str) -> float | None:
        return _finite(metrics[key]) if key in metrics else None

    out = [(name, v, {}) for key, names in AS_IS.items() if (v := get(key)) is not None for name in names]
    if (v := get(keys.TOKENS_PER_S)) is not None:
        out.append(("rollout_tokens_per_s", v, {"worker": "all"}))
    for key in metrics:
        if key.startswith(keys.TOKENS_PER_S + "/") and (v := get(key)) is not None:
            out.append(("rollout_tokens_per_s", v, {"worker": key[len(keys.TOKENS_PER_S) + 1 :]}))
    if (calls := get(keys.TOOL_CALLS)) is not None and (seconds := get(keys.ROLLOUT_S)):
        out.append(("tool_calls_per_s", calls / seconds, {}))
    for rule in RULES:
        if (v := get(keys.health_value(rule))) is not None:
            out.append(("health_value", v, {"rule": rule}))
    out.append(("steps", 1.0, {}))
    return out


class RunMetrics:
    """One run's Ray metrics. Create after Ray is connected; call `record` once per step."""

    def __init__(self, run_name: str):
        self.run = run_name
        self.metrics = {}
        for name, (kind, description, tag_keys) in METRICS.items():
            extra = {"boundaries": SECONDS_BOUNDARIES} if kind is Histogram else {}
            metric = kind(PREFIX + name, description=description, tag_keys=("run", *tag_keys), **extra)
            metric.set_default_tags({"run": run_name})
            self.metrics[name] = metric

    def record(self, metrics: dict) -> None:
        """One step's metrics (the dict the loggers get)."""
        for name, value, tags in readings(metrics):
            metric = self.metrics[name]
            if isinstance(metric, Histogram):
                metric.observe(max(value, 0.0), tags=tags)
            elif isinstance(metric, Counter):
                if value > 0:  # Ray counters take only positive increments
                    metric.inc(value, tags=tags)
            else:
                metric.set(value, tags=tags)


_runs: dict[str, RunMetrics] = {}


def publish(run_name: str, metrics: dict) -> None:
    """The driver's one call per step: record `metrics` under `run_name` (no-op without Ray)."""
    if not ray.is_initialized():
        return
    if run_name not in _runs:
        _runs[run_name] = RunMetrics(run_name)
    _runs[run_name].record(metrics)
