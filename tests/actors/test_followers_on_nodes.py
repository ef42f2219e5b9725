"""Environment pools and tool executors that follow their rollout worker run on its node
(relay/config/roles.py): a three-raylet cluster, two rollout nodes that each hold exactly one
worker with its EnvPool and tool executor, and the learner on the head. Each worker rolls out
math_tool episodes (an environment and a sandboxed tool call per episode) on its own followers.
Where each actor ran is read from the GCS actor table.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import ray

from benchmarks.local_nodes import local_cluster
from relay.config import load_config
from relay.run.model_source import resolve_model_path
from relay.run.rows import task_rows
from relay.tools.sandbox import SandboxConfig, sandbox_available
from relay_trainer.pools import actor_pools

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not sandbox_available(SandboxConfig())[0], reason="the code sandbox cannot be built here")


@pytest.fixture(scope="module")
def cluster():
    head = {"num_cpus": 1, "resources": {"learner_node": 1}}
    rollout = {"num_cpus": 2, "resources": {"rollout_node": 1}}  # a worker (1 CPU) and its followers (0.5 each)
    with local_cluster(head, (rollout, rollout)) as (c, nodes, _):
        yield c, {n.node_id for n in nodes}


def actor_nodes(prefix: str) -> dict[str, str]:
    return {a["Name"]: a["Address"]["NodeID"] for a in ray._private.state.actors().values() if a["Name"].startswith(prefix)}


@pytest.mark.slow  # placement's bundles and names stay in the default tier: tests/unit/test_follow_rollout_config.py
def test_each_rollout_worker_has_its_environments_and_tools_on_its_node(cluster):
    _, rollout_nodes = cluster
    cfg = load_config(
        REPO / "configs/math_tool.yaml",
        [
            "rollout.n=2", "training.prompts_per_step=2",
            "resources.rollout.count=2", "resources.rollout.node_resource=rollout_node",
            "resources.learner.node_resource=learner_node",
            "resources.env.follow_rollout=true", "resources.env.cpus=0.5",
            "tools.executors.follow_rollout=true", "tools.executors.cpus=0.5",
        ],
    )  # fmt: skip
    assert cfg.resources.colocate is False
    path = resolve_model_path(cfg.model, cfg.task, cfg.tools, cfg.critic, cfg.reward_model)
    with actor_pools(cfg, path, "follow") as actors:
        assert len(actors.rollout) == len(actors.env) == len(actors.tools) == 2
        rows = task_rows(cfg.task, cfg.tools, cfg.run.seed)[0][:1]
        for worker in actors.rollout:  # episodes on the worker's own EnvPool and executor
            samples, _ = ray.get(worker.rollout.remote(rows, 0, 0))
            assert len(samples) == 2 and all(s.meta["env"]["error"] is None for s in samples)
        groups = {g["name"]: g for g in ray.util.placement_group_table().values() if g["state"] == "CREATED"}
        assert groups["follow/rollout-1"]["strategy"] == "STRICT_PACK"
        assert len(groups["follow/rollout-1"]["bundles"]) == 3  # the worker, its tool executor, its EnvPool

    placed = actor_nodes("follow/")
    for i in (0, 1):
        node = placed[f"follow/rollout-{i}"]
        assert node in rollout_nodes
        assert placed[f"follow/env-{i}"] == node and placed[f"follow/tools-{i}"] == node, placed
    assert placed["follow/rollout-0"] != placed["follow/rollout-1"]
