"""Roles land on the node types their config names: a three-raylet cluster in one test.

Two raylets: a head that declares a GPU and `learner_node` (the driver, this test, runs
there too), and a CPU node that declares `rollout_node`; `resources.<role>.node_resource` puts
the learner and the rollout worker on them, and a 2-step loop.train() runs across the nodes
(weights cross nodes through the object store). The run's Ray metrics are then read back from
the head's Prometheus export. Where each actor ran is read from the GCS actor table (it keeps dead actors,
so it can be read after train() has killed them); the dashboard's state API is not used here
because this cluster runs without a dashboard (it is tested in tests/e2e/test_ray_job.py).
"""

from __future__ import annotations

import time

import pytest
import ray

from benchmarks.local_nodes import local_cluster
from relay.config import ConfigError, RoleResources, load_config
from relay_trainer.feasibility import NODE_RESOURCE_SHARE, role_bundle
from tests.prometheus import scrape


def test_bundle_carries_the_node_label():
    assert role_bundle(RoleResources(cpus=1, gpus=1, node_resource="learner_node")) == {
        "CPU": 1,
        "GPU": 1,
        "learner_node": NODE_RESOURCE_SHARE,
    }
    assert role_bundle(RoleResources(cpus=0.5)) == {"CPU": 0.5}


def test_node_resource_must_be_a_custom_resource():
    with pytest.raises(ConfigError, match="resources.rollout.node_resource"):
        load_config(None, ["resources.rollout.node_resource=GPU"])
    assert (
        load_config(None, ["resources.rollout.node_resource=rollout_node"]).resources.rollout.node_resource
        == "rollout_node"
    )


@pytest.fixture(scope="module")
def cluster():
    head = {"num_cpus": 2, "num_gpus": 1, "resources": {"learner_node": 1}}
    rollout = {"num_cpus": 2, "resources": {"rollout_node": 1}}
    metrics_each_second = {"metrics_report_interval_ms": 1000}  # the read-back waits 1 s, not 10
    with local_cluster(head, (rollout,), metrics_each_second) as (c, [rollout_node], _):
        yield c, {"learner": c.head_node.node_id, "rollout": rollout_node.node_id}


def actor_nodes(prefix: str) -> dict[str, str]:
    """name -> node id of every actor whose name starts with `prefix`, alive or dead."""
    table = ray._private.state.actors()  # the GCS actor table; needs no dashboard
    return {a["Name"]: a["Address"]["NodeID"] for a in table.values() if a["Name"].startswith(prefix)}


def test_roles_run_on_their_nodes(cluster, tmp_path):
    from relay_trainer import loop

    _, node_ids = cluster
    cfg = load_config(
        "configs/default.yaml",
        [
            "training.steps=2",
            "training.prompts_per_step=4",
            "rollout.n=4",
            "task.num_eval_rows=8",
            "checkpoint.save_hf_model=false",
            "logging.console=false",
            f"run.output_dir={tmp_path}",
            "run.name=multinode",
            "resources.learner.node_resource=learner_node",
            "resources.learner.gpus=1",
            "resources.rollout.node_resource=rollout_node",
            "task.reward_actor=true",  # an EnvPool role, with no node label
        ],
    )
    summary = loop.train(cfg)

    placed = actor_nodes("multinode/")
    assert placed["multinode/learner-0"] == node_ids["learner"]
    assert placed["multinode/rollout-0"] == node_ids["rollout"]
    assert node_ids["learner"] != node_ids["rollout"]
    assert "multinode/env-0" in placed  # no label: anywhere with a free CPU
    # Outside Tune each role gets its own placement group (removed again when train() ends);
    # tests/e2e/test_tune.py relies on the table keeping removed groups.
    groups = {pg["name"]: pg for pg in ray.util.placement_group_table().values()}
    assert {"multinode/rollout", "multinode/learner", "multinode/env"} <= set(groups)
    assert groups["multinode/learner"]["bundles"][0] == {"CPU": 1.0, "GPU": 1.0, "learner_node": NODE_RESOURCE_SHARE}
    assert (tmp_path / "multinode" / "metrics.jsonl").read_text().count('"step"') == 2
    assert summary["run_dir"].endswith("multinode")

    # The driver published each step as run-tagged Ray metrics: read them back from the export
    # of the node the driver runs on (Ray reports them every second here; bounded wait).
    port = next(n["MetricsExportPort"] for n in ray.nodes() if n["NodeID"] == ray.get_runtime_context().get_node_id())
    deadline, found = time.monotonic() + 30, {}
    while not found.get("ray_relay_steps_total") and time.monotonic() < deadline:
        time.sleep(1)
        found = {name: value for name, labels, value in scrape(port) if labels.get("run") == "multinode"}
    assert found.get("ray_relay_steps_total") == 2
    assert "ray_relay_reward_mean" in found and "ray_relay_weight_sync_seconds_last" in found


def test_broadcast_weight_sync_crosses_nodes(cluster, tiny_model_path):
    """The gloo group across two raylets: the store listens on the learner node's address (not
    loopback, not every interface) and the worker on the other node gets every tensor exactly."""
    from relay.config import Config, ModelConfig, ResourcesConfig
    from tests.weight_checks import check_sync

    res = ResourcesConfig(
        learner=RoleResources(cpus=1, node_resource="learner_node"),
        rollout=RoleResources(cpus=1, node_resource="rollout_node"),
        env=RoleResources(cpus=0.25),
        weight_sync="broadcast",
    )
    address = check_sync(
        Config(model=ModelConfig(path=tiny_model_path), resources=res), tiny_model_path, "multinode-broadcast"
    )
    assert address == ray.util.get_node_ip_address()  # the head's address, where the learner runs
    placed = actor_nodes("multinode-broadcast/")
    assert placed["multinode-broadcast/learner-0"] != placed["multinode-broadcast/rollout-0"]
