"""Run-tagged Ray metrics: they reach the node's Prometheus export (what the dashboard and Grafana
read), and two real training steps give every one of them a value.

Ray exports custom metrics up to its report interval after they are recorded (10 s by default,
1 s on this module's Ray), so the read-back polls, bounded by a deadline; no assertion is about time.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
from pathlib import Path

import pytest
import ray

from relay.config import load_config
from relay.run import metric_keys as keys
from relay.tools.sandbox import SandboxConfig, sandbox_available
from relay_trainer import loop, steps
from relay_trainer import metrics as relay_metrics
from tests.prometheus import export_port, scrape

REPO = Path(__file__).resolve().parents[2]
GRAFANA_DASHBOARD = REPO / "grafana" / "relay_dashboard.json"

STEP = {
    "reward/mean": 0.625,
    "kl/mean": 0.0125,
    "actor/pg_loss": -0.25,
    "rollout/tokens_per_s": 1500.0,
    "rollout/tokens_per_s/0": 800.0,
    "rollout/tokens_per_s/1": 700.0,
    "time/step_s": 0.3,
    "time/sync_s": 0.02,
    "weights/version": 7,
    "weights/staleness": 1,
    "tools/calls": 12,
    "time/rollout_s": 4.0,
    "tools/errors": 3,
    "reward/std": float("nan"),
}


def test_publish_without_ray_is_a_no_op():
    if ray.is_initialized():
        pytest.skip("Ray is already up in this process")
    relay_metrics.publish("no-ray", STEP)
    assert "no-ray" not in relay_metrics._runs


@pytest.fixture(scope="module")
def ray_session():
    temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: unix socket paths
    # Logical CPUs for a whole run's actors (the two-step test); the loop's phases do not overlap.
    # Metrics reach the export every second instead of every 10 s: each read-back waits about 1 s.
    ray.init(
        num_cpus=4,
        include_dashboard=False,
        _temp_dir=temp_dir,
        namespace="relay-metrics-test",
        _system_config={"metrics_report_interval_ms": 1000},
    )
    try:
        yield ray._private.worker.global_worker.node.get_session_dir_path()
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)


def wait_for(port: int, want: set[str], run: str, deadline_s: float = 30.0):
    """Scrape until every metric in `want` shows up with run=`run`, or the deadline passes."""
    deadline = time.monotonic() + deadline_s
    while True:
        samples = [s for s in scrape(port) if s[1].get("run") == run]
        if want <= {name for name, _, _ in samples} or time.monotonic() > deadline:
            return samples
        time.sleep(1)


def test_step_metrics_reach_the_prometheus_export(ray_session):
    port = export_port(ray_session)
    assert port is not None, f"no metrics_export_port_* in {ray_session}"
    relay_metrics.publish("metrics-test", STEP)
    relay_metrics.publish("other-run", {"reward/mean": 0.1})  # a second run on the same cluster
    p = "ray_relay_"
    want = {
        p + n
        for n in (
            "reward_mean",
            "kl_mean",
            "policy_loss",
            "rollout_tokens_per_s",
            "step_seconds_count",
            "weight_sync_seconds_count",
            "step_seconds_last",
            "staleness",
            "tool_calls_per_s",
            "tool_errors_total",
            "weights_version",
            "steps_total",
        )
    }
    samples = wait_for(port, want, "metrics-test")
    got = {(name, labels.get("worker")): value for name, labels, value in samples}
    assert want <= {name for name, _ in got}, f"missing: {want - {name for name, _ in got}}"
    assert got[(p + "reward_mean", None)] == pytest.approx(0.625)
    assert got[(p + "kl_mean", None)] == pytest.approx(0.0125)
    assert got[(p + "policy_loss", None)] == pytest.approx(-0.25)
    assert got[(p + "rollout_tokens_per_s", "all")] == pytest.approx(1500.0)
    assert got[(p + "rollout_tokens_per_s", "0")] == pytest.approx(800.0)
    assert got[(p + "rollout_tokens_per_s", "1")] == pytest.approx(700.0)
    assert got[(p + "step_seconds_last", None)] == pytest.approx(0.3)
    assert got[(p + "step_seconds_count", None)] == 1
    assert got[(p + "weight_sync_seconds_count", None)] == 1
    assert got[(p + "staleness", None)] == 1
    assert got[(p + "tool_calls_per_s", None)] == pytest.approx(3.0)
    assert got[(p + "tool_errors_total", None)] == 3
    assert got[(p + "weights_version", None)] == 7
    assert got[(p + "steps_total", None)] == 1
    # The other run's value is its own; keys a step lacks are not invented for it.
    other = {name: value for name, labels, value in scrape(port) if labels.get("run") == "other-run"}
    assert other[p + "reward_mean"] == pytest.approx(0.1)
    assert p + "kl_mean" not in other and p + "reward_std" not in got


@pytest.mark.slow
@pytest.mark.skipif(not sandbox_available(SandboxConfig())[0], reason="the code sandbox cannot be built here")
def test_two_training_steps_give_every_ray_metric_a_value(ray_session, tmp_path, monkeypatch):
    """Every metric RunMetrics defines gets a value from what the loop produces: two steps of the
    tool-using math task with a reference policy (kl/mean). Ray's metric objects cannot be read
    back in process, so the test observes `readings`, through which RunMetrics.record turns each
    step's metrics dict into values (the Prometheus test above covers the rest of the way)."""
    recorded, batches = [], []
    readings, rollout = relay_metrics.readings, steps.rollout

    def recording_readings(metrics):
        recorded.append(readings(metrics))
        return recorded[-1]

    def recording_rollout(actors, rows, *args, **kwargs):
        samples, metrics = rollout(actors, rows, *args, **kwargs)
        if not kwargs.get("greedy"):
            batches.append(samples)
        return samples, metrics

    monkeypatch.setattr(relay_metrics, "readings", recording_readings)
    monkeypatch.setattr(steps, "rollout", recording_rollout)
    cfg = load_config(
        REPO / "configs/math_tool.yaml",
        [
            f"run.output_dir={tmp_path}",
            "run.name=metrics-e2e",
            "training.steps=2",
            "training.prompts_per_step=2",
            "rollout.n=2",
            "task.num_eval_rows=2",
            "algorithm.kl_coef=0.001",
            "checkpoint.save_hf_model=false",
            "logging.console=false",
        ],
    )
    reported = []
    loop.train(cfg, report=lambda step, metrics: reported.append(metrics))

    assert len(recorded) == len(reported) == len(batches) == 2
    for step_readings, metrics, samples in zip(recorded, reported, batches):
        names = {name for name, _, _ in step_readings}
        # a sync run has no rollout buffer, and this one no reward model
        want = set(relay_metrics.METRICS) - relay_metrics.PIPELINE_METRICS - relay_metrics.RM_ONLY
        assert names == want, f"no value for {want - names}; unexpected {names - want}"
        assert {tags.get("worker") for name, _, tags in step_readings if name == "rollout_tokens_per_s"} == {"all", "0"}
        # the tool counts are the batch's own tool-call records
        calls = [c for s in samples for c in s.tool_calls]
        assert metrics[keys.TOOL_CALLS] == len(calls)
        assert metrics[keys.TOOL_ERRORS] == sum(not c["ok"] for c in calls)
        # the learner's own update time has its own key, inside the driver's update phase
        assert 0 < metrics[keys.LEARNER_UPDATE_S] <= metrics[keys.phase_seconds("update")]
        # every phase's time, the reward's included: the rollout workers score inside the rollout phase
        assert all(keys.phase_seconds(p) in metrics for p in ("step", "rollout", "reference", "update", "sync"))
        assert 0 < metrics[keys.REWARD_S] <= metrics[keys.ROLLOUT_S]
    assert sum(m[keys.TOOL_CALLS] for m in reported) > 0


def grafana_metric_names() -> set[str]:
    """Every relay metric the shipped Grafana dashboard's panels and run variable query."""
    dashboard = json.loads(GRAFANA_DASHBOARD.read_text())
    queries = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    queries += [v["query"]["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return {name for query in queries for name in re.findall(r"\bray_relay_\w+", query)}


@pytest.mark.skipif(not sandbox_available(SandboxConfig())[0], reason="the code sandbox cannot be built here")
def test_every_grafana_query_names_a_metric_a_real_run_exports(ray_session, tmp_path):
    """Two real steps of the tool-using math task with a reference policy (so tool and KL metrics
    exist too), then the node's Prometheus export must hold every metric the dashboard queries.
    training.mode=async, so the pipeline's buffer gauges (queue depth, groups in flight) exist.
    The sandbox takes code of at most 1 byte, so every tool call fails: Ray exports a counter
    only once it has counted something, and the tool-error counter must have a series."""
    names = grafana_metric_names()
    assert len(names) >= 12, names  # the parse found the queries
    cfg = load_config(
        REPO / "configs/math_tool.yaml",
        [
            f"run.output_dir={tmp_path}",
            "run.name=grafana-names",
            "training.mode=async",
            "tools.sandbox_limits.max_code_bytes=1",
            "training.steps=2",
            "training.prompts_per_step=2",
            "rollout.n=2",
            "task.num_eval_rows=2",
            "algorithm.kl_coef=0.001",
            "checkpoint.save_hf_model=false",
            "logging.console=false",
        ],
    )
    loop.train(cfg)
    exported = {name for name, _, _ in wait_for(export_port(ray_session), names, "grafana-names", deadline_s=60)}
    assert names <= exported, f"the dashboard queries metrics no run exports: {sorted(names - exported)}"


def test_reward_model_metrics_are_read_only_when_the_step_has_them():
    names = {name for name, _, _ in relay_metrics.readings(STEP)}
    assert not names & relay_metrics.RM_ONLY  # a run without a reward model exports none of them
    rm = {"rm/score_mean": 1.5, "rm/rule_reward_mean": 0.75, "rm/errors": 2.0, "rm/seconds": 0.3, "rm/score_std": 1.0}
    got = {name: v for name, v, _ in relay_metrics.readings({**STEP, **rm})}
    assert {k: got[k] for k in relay_metrics.RM_ONLY} == {
        "rm_score_mean": 1.5,
        "rm_rule_reward_mean": 0.75,
        "rm_errors": 2.0,
        "rm_seconds": 0.3,
    }


def test_health_values_are_read_per_rule():
    health = {"health/alarms": 2.0, "health/entropy_collapse": 0.16, "health/fired/entropy_collapse": 1.0}
    got = [(name, v, tags) for name, v, tags in relay_metrics.readings({**STEP, **health}) if name.startswith("health")]
    # the fired markers are the plot's: the dashboard reads the count and each rule's value
    assert got == [("health_alarms", 2.0, {}), ("health_value", 0.16, {"rule": "entropy_collapse"})]
