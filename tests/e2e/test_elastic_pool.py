"""An elastic rollout pool on the autoscaling cluster of cluster.local.yaml (resources.rollout.count:
{min: 1, max: 2}, relay_trainer/elastic.py): the run starts one rollout worker; rollout is most of
each step (a slow reward function, scored in the worker), so the pool asks the autoscaler for room
for a second; the autoscaler adds a second rollout node, the second worker starts there and rolls
out; once the job ends the request is withdrawn and the autoscaler takes every node back. In the
env-follows case each worker scores on an EnvPool of its own (follow_rollout), which starts on the
new node with the added worker.

Each rollout worker asks for 2 CPUs, a whole rollout_worker node, so a second worker needs a
second node. What the autoscaler did is read from its own report (the dashboard's
/api/cluster_status) and from the GCS node and actor tables, as tests/e2e/test_local_cluster.py
does, with its cluster fixture (own ports, temp folder and token; stopped by its processes).
"""

from __future__ import annotations

import json
import time

import pytest

from scripts.local_cluster import HEAD, active_types, camel, gcs_nodes, get, http
from tests.e2e.test_local_cluster import IDLE_TIMEOUT_S, local_cluster, submit  # noqa: F401  (the fixture)

pytestmark = pytest.mark.slow  # about 2-3 minutes a case: a head with the dashboard, three added nodes, a 40-step job

ROLLOUT_NODES = camel("rollout_worker")


# follow: each worker scores on an EnvPool of its own, in its group (relay/config/roles.py)
FOLLOW = ["task.reward_actor=true", "resources.env.follow_rollout=true", "resources.env.cpus=0.5"]


@pytest.mark.parametrize("follow", [False, True], ids=["plain", "env-follows"])
def test_the_pool_grows_from_one_to_two_workers_as_the_autoscaler_adds_a_node(local_cluster, tmp_path, follow):  # noqa: F811
    cluster = local_cluster
    assert active_types(cluster) == {HEAD: 1}
    run_args = [
        "resources.rollout.count={min: 1, max: 2}",
        # a rollout_worker node (2 CPUs) holds one worker (and its EnvPool)
        "resources.rollout.cpus=1.5" if follow else "resources.rollout.cpus=2",
        *(FOLLOW if follow else []),
        "task.reward_fn=tests.e2e.elastic_rewards:slow_arithmetic",
        "training.steps=40", "training.prompts_per_step=4", "rollout.n=4", "task.num_eval_rows=4",
        f"run.output_dir={tmp_path}", "checkpoint.save_hf_model=false", "training.eval_before=false",
    ]  # fmt: skip
    job = f"elastic-pool-{'env-follows' if follow else 'plain'}"
    submit(cluster, job, run_args)

    most, deadline = 0, time.monotonic() + 600
    while (status := get(cluster, f"/api/jobs/{job}")["status"]) in ("PENDING", "RUNNING"):
        assert time.monotonic() < deadline, "the job did not end"
        most = max(most, active_types(cluster).get(ROLLOUT_NODES, 0))
        time.sleep(1)
    logs = http(f"{cluster.address}/api/jobs/{job}/logs", cluster.token)[1]
    assert status == "SUCCEEDED", logs
    assert "elastic pool: rollout-1 joins (2 rolling out)" in logs["logs"], logs["logs"][-5000:]

    # The autoscaler's own report: a second rollout node was active while the run wanted two workers.
    assert most == 2, most

    # The run's metrics: one worker at first, two once the second joined; it asked for no more than max.
    steps = [json.loads(line) for line in (tmp_path / "local-cluster" / "metrics.jsonl").open()]
    workers = [s["rollout/workers"] for s in steps]
    assert workers[0] == 1 and max(workers) == 2 and workers[-1] == 2, workers
    assert max(s["rollout/workers_wanted"] for s in steps) == 2

    # The GCS tables: the two workers ran on two different rollout nodes.
    rollout_nodes = {n["node_id"] for n in gcs_nodes(cluster) if "rollout_node" in n["resources_total"]}
    actors = get(cluster, "/api/v0/actors?detail=true&limit=1000")["result"]["result"]
    placed = {a["name"]: a["node_id"] for a in actors if a["name"].startswith("local-cluster/rollout-")}
    assert set(placed) == {"local-cluster/rollout-0", "local-cluster/rollout-1"}, placed
    assert len(set(placed.values())) == 2 and set(placed.values()) <= rollout_nodes, (placed, rollout_nodes)
    if follow:  # each worker's EnvPool started on its worker's node, the added one's with it
        pools = {a["name"]: a["node_id"] for a in actors if a["name"].startswith("local-cluster/env-")}
        assert pools == {f"local-cluster/env-{i}": placed[f"local-cluster/rollout-{i}"] for i in (0, 1)}, pools

    # The job's end withdrew the request: idle, every added node goes back.
    deadline = time.monotonic() + IDLE_TIMEOUT_S + 90
    while active_types(cluster) != {HEAD: 1}:
        assert time.monotonic() < deadline, active_types(cluster)
        time.sleep(1)
