"""Run-tagged Ray metrics reach the node's Prometheus export (what the dashboard and Grafana read).

Ray exports custom metrics about 10 s after they are recorded (its report interval), so the
read-back polls, bounded by a deadline; no assertion is about time.
"""
from __future__ import annotations

import shutil
import tempfile
import time

import pytest
import ray

from actors import metrics as relay_metrics
from tests.prometheus import export_port, scrape

STEP = {
    "reward/mean": 0.625, "kl/mean": 0.0125, "actor/pg_loss": -0.25, "rollout/tokens_per_s": 1500.0,
    "rollout/tokens_per_s/0": 800.0, "rollout/tokens_per_s/1": 700.0, "time/step_s": 0.3,
    "time/sync_s": 0.02, "weights/version": 7, "weights/batch_version": 5, "rollout/queue_depth": 2,
    "tools/calls": 12, "time/rollout_s": 4.0, "tools/errors": 3, "reward/std": float("nan"),
}


def test_publish_without_ray_is_a_no_op():
    if ray.is_initialized():
        pytest.skip("Ray is already up in this process")
    relay_metrics.publish("no-ray", STEP)
    assert "no-ray" not in relay_metrics._runs


@pytest.fixture(scope="module")
def ray_session():
    temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: unix socket paths
    ray.init(num_cpus=1, include_dashboard=False, _temp_dir=temp_dir, namespace="relay-metrics-test")
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
    want = {p + n for n in ("reward_mean", "kl_mean", "policy_loss", "rollout_tokens_per_s", "step_seconds_count",
                            "weight_sync_seconds_count", "step_seconds_last", "staleness", "queue_depth",
                            "tool_calls_per_s", "tool_errors_total", "weights_version", "steps_total")}
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
    assert got[(p + "staleness", None)] == 1  # the update ran on version 6, the batch was made by 5
    assert got[(p + "queue_depth", None)] == 2
    assert got[(p + "tool_calls_per_s", None)] == pytest.approx(3.0)
    assert got[(p + "tool_errors_total", None)] == 3
    assert got[(p + "weights_version", None)] == 7
    assert got[(p + "steps_total", None)] == 1
    # The other run's value is its own; keys a step lacks are not invented for it.
    other = {name: value for name, labels, value in scrape(port) if labels.get("run") == "other-run"}
    assert other[p + "reward_mean"] == pytest.approx(0.1)
    assert p + "kl_mean" not in other and p + "reward_std" not in got
