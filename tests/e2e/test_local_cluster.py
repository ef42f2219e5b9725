"""cluster.local.yaml as docs/cluster.md runs it: `RAY_FAKE_CLUSTER=1 ray start --head
--autoscaling-config=...`, `ray job submit --working-dir local://<checkout> -- python driver.py
--config configs/local_cluster.yaml`, the autoscaler adding a node of each type the roles are pinned to,
and taking them back once they are idle; then the cluster is stopped by its processes
(scripts/local_cluster.py), never `ray stop`, which would end every Ray on the machine.

Its own ports, its own short temp folder and its own token, as tests/e2e/test_ray_job.py; the
config's GCS address follows the head's port, and its idle timeout is shortened to 12 s. What
the autoscaler did is read from its own report (the dashboard's /api/cluster_status) and from
the GCS node table (/api/v0/nodes, which keeps dead nodes with their start and end times).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest

from scripts.local_cluster import HEAD, REPO, active_types, camel, cluster_processes, gcs_nodes, get, http, start, stop
from tests.e2e.test_ray_job import RAY

pytestmark = pytest.mark.slow  # about 90 s: a head with the dashboard, two added nodes, a job

IDLE_TIMEOUT_S = 12


@pytest.fixture
def local_cluster():
    cluster = start(idle_timeout_s=IDLE_TIMEOUT_S)
    try:
        yield cluster
    finally:
        stop(cluster.temp_dir, grace_s=5)
        assert not cluster_processes(cluster.temp_dir)
        shutil.rmtree(cluster.temp_dir, ignore_errors=True)


def submit(cluster, submission_id: str, run_args: list[str]) -> None:
    """`ray job submit --working-dir local://<checkout>` of driver.py on configs/local_cluster.yaml,
    not waited for. In place, not uploaded: the fake provider's nodes share the head's session
    folder, and each node's runtime-env agent unpacks an uploaded working dir into the same folder
    anew (it deletes the folder first), under the workers already importing from it (docs/cluster.md)."""
    job = subprocess.run(
        [RAY, "job", "submit", f"--address={cluster.address}", "--no-wait", f"--submission-id={submission_id}",
         f"--working-dir=local://{REPO}", "--",
         "python", "driver.py", "--config", "configs/local_cluster.yaml", *run_args],
        cwd=REPO, env=cluster.env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]


def test_the_autoscaler_adds_a_node_per_role_type_for_a_job_and_removes_them_when_idle(local_cluster, tmp_path):
    cluster = local_cluster
    assert active_types(cluster) == {HEAD: 1}
    run_args = ["training.steps=1", "training.prompts_per_step=4", "rollout.n=4", "task.num_eval_rows=4"]
    run_args += [f"run.output_dir={tmp_path}", "checkpoint.save_hf_model=false", "training.eval_before=false"]
    submitted = time.time()
    submit(cluster, "local-cluster", run_args)

    seen, deadline = {}, time.monotonic() + 400
    while (status := get(cluster, "/api/jobs/local-cluster")["status"]) in ("PENDING", "RUNNING"):
        assert time.monotonic() < deadline, "the job did not end"
        for node_type, count in active_types(cluster).items():
            seen.setdefault(node_type, (count, time.time() - submitted))
        time.sleep(1)
    ended = time.time()
    logs = http(f"{cluster.address}/api/jobs/local-cluster/logs", cluster.token)[1]
    assert status == "SUCCEEDED", logs
    assert "waiting for the autoscaler to add nodes" in logs["logs"]
    assert [json.loads(line)["step"] for line in (tmp_path / "local-cluster" / "metrics.jsonl").open()] == [1]
    assert {camel("rollout_worker"), camel("learner_worker")} <= set(seen), seen

    # The GCS node table: one node of each worker type, each holding its role's actor.
    workers = [n for n in gcs_nodes(cluster) if not n["is_head_node"]]
    labelled = {
        label: n for n in workers for label in ("rollout_node", "learner_node") if label in n["resources_total"]
    }
    assert len(workers) == 2 and set(labelled) == {"rollout_node", "learner_node"}, workers
    actors = get(cluster, "/api/v0/actors?detail=true&limit=1000")["result"]["result"]
    placed = {a["name"]: a["node_id"] for a in actors if a["name"].startswith("local-cluster/")}
    assert placed["local-cluster/rollout-0"] == labelled["rollout_node"]["node_id"]
    assert placed["local-cluster/learner-0"] == labelled["learner_node"]["node_id"]

    # Idle once the job ended: the autoscaler removes both after its idle timeout.
    deadline = time.monotonic() + IDLE_TIMEOUT_S + 90
    while active_types(cluster) != {HEAD: 1}:
        assert time.monotonic() < deadline, active_types(cluster)
        time.sleep(1)
    removed = time.time()
    states = {n["node_id"]: n for n in gcs_nodes(cluster)}
    for node in labelled.values():
        assert states[node["node_id"]]["state"] == "DEAD"
    joined = {label: n["start_time_ms"] / 1000 - submitted for label, n in labelled.items()}
    left = {label: states[n["node_id"]]["end_time_ms"] / 1000 - ended for label, n in labelled.items()}
    print(
        f"local cluster: nodes joined {', '.join(f'{k} {v:.1f} s' for k, v in joined.items())} after the submit; "
        f"job {ended - submitted:.1f} s; nodes left {', '.join(f'{k} {v:.1f} s' for k, v in left.items())} "
        f"after the job ended (idle timeout {IDLE_TIMEOUT_S} s); the autoscaler reported the head alone "
        f"{removed - ended:.1f} s after it"
    )
