"""cluster.local.yaml: valid for Ray's autoscaler, on the fake multi-node provider, with node
types for every role configs/local_cluster.yaml pins, and the head started as docs/cluster.md says.
(tests/e2e/test_local_cluster.py starts it and runs a job on it.)"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import yaml
from ray.autoscaler._private.util import validate_config

from relay.config import load_config
from relay_trainer.pools import actor_roles

REPO = Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((REPO / "cluster.local.yaml").read_text())
HEAD = "ray.head.default"  # the fake provider's name for the head's type


def test_it_is_a_valid_autoscaler_config_on_the_fake_provider():
    validate_config(copy.deepcopy(CONFIG))
    provider = CONFIG["provider"]
    assert provider["type"] == "fake_multinode"
    assert (
        provider["use_node_id_as_ip"] and provider["disable_node_updaters"] and provider["disable_launch_config_check"]
    )
    assert CONFIG["head_node_type"] == HEAD and CONFIG["available_node_types"][HEAD]["max_workers"] == 0


def test_the_documented_head_matches_the_config():
    """The nodes it adds find the GCS at provider.gcs_address, and the autoscaler believes the
    head has the config's CPUs: the documented `ray start` must say the same port and CPUs."""
    port = CONFIG["provider"]["gcs_address"].rsplit(":", 1)[1]
    cpus = CONFIG["available_node_types"][HEAD]["resources"]["CPU"]
    for text in ((REPO / "cluster.local.yaml").read_text(), (REPO / "docs/cluster.md").read_text()):
        starts = re.findall(r"RAY_FAKE_CLUSTER=1 ray start --head[^\n]*(?:\\\n[^\n]*)*", text)
        assert starts
        for start in starts:
            assert f"--port={port}" in start and f"--num-cpus={cpus:g}" in start, start
            assert "--autoscaling-config=cluster.local.yaml" in start


def test_every_pinned_role_has_a_node_type_that_holds_it():
    cfg = load_config(REPO / "configs/local_cluster.yaml", [])
    types = CONFIG["available_node_types"]
    for role, res in actor_roles(cfg).items():
        assert res.node_resource, role  # every role on an added node: the head only runs the driver
        holders = [t for t in types.values() if t["resources"].get(res.node_resource) and t["max_workers"] > 0]
        assert holders, role
        assert any(t["resources"]["CPU"] >= res.cpus * res.count for t in holders), role
    assert sum(t["max_workers"] for name, t in types.items() if name != HEAD) <= CONFIG["max_workers"]
