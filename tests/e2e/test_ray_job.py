"""Run relay the way Ray users do: `ray start --head`, `ray job submit --working-dir .`, resubmit
with `--resume`, and find the run's named actors through the dashboard's state API.

The head runs with token authentication ON, as cluster.yaml has it, but with its own token in
this test's temp folder (RAY_AUTH_TOKEN_PATH), never ~/.ray/auth_token: the CLI calls get
RAY_AUTH_MODE=token and that path; the REST calls send `Authorization: Bearer <token>`.

Every port is a free one picked here (another Ray may hold the defaults), the temp folder is
a short /tmp/rayXXXX (unix socket paths), and teardown kills the head's process group and then
any process still naming that temp folder (job drivers run in their own sessions).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from scripts.local_cluster import free_ports, http

REPO = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).with_name("ray"))
EXCLUDES = [".venv", "runs", ".git", "**/__pycache__", ".pytest_cache", ".hypothesis", "*.egg-info"]
RUN_ARGS = [
    "training.prompts_per_step=4",
    "rollout.n=4",
    "task.num_eval_rows=8",
    "checkpoint.save_hf_model=false",
    "run.name=job",
]


def processes_naming(text: str) -> list[int]:
    """PIDs whose command line contains `text` (this test's unique temp folder)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


@pytest.fixture(scope="module")
def head():
    temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    token = uuid.uuid4().hex
    token_path = Path(temp_dir) / "auth_token"
    token_path.write_text(token)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN")}
    env.update(
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN_PATH=str(token_path),
        RAY_USAGE_STATS_ENABLED="0",
        RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S="0",  # SIGTERM: stop at once, no drain wait
        PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}",  # the job's `python` is this venv's
        PYTHONUNBUFFERED="1",
    )
    gcs, dashboard, client, agent_http, agent_grpc, metrics, node_manager, object_manager, runtime_env = free_ports(9)
    log = open(Path(temp_dir) / "ray_start.log", "w")
    proc = subprocess.Popen(
        [
            RAY,
            "start",
            "--head",
            "--block",
            "--disable-usage-stats",
            f"--temp-dir={temp_dir}",
            "--num-cpus=3",
            "--node-ip-address=127.0.0.1",
            f"--port={gcs}",
            "--include-dashboard=true",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={dashboard}",
            f"--ray-client-server-port={client}",
            f"--dashboard-agent-listen-port={agent_http}",
            f"--dashboard-agent-grpc-port={agent_grpc}",
            f"--metrics-export-port={metrics}",
            f"--node-manager-port={node_manager}",
            f"--object-manager-port={object_manager}",
            f"--runtime-env-agent-port={runtime_env}",
            "--min-worker-port=0",
            "--max-worker-port=0",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=temp_dir,
    )
    address = f"http://127.0.0.1:{dashboard}"
    try:
        deadline = time.monotonic() + 120
        while http(f"{address}/api/jobs/", token)[0] != 200:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    f"ray start --head did not come up:\n{(Path(temp_dir) / 'ray_start.log').read_text()[-3000:]}"
                )
            time.sleep(1)
        yield {"address": address, "token": token, "env": env, "temp_dir": temp_dir}
    finally:
        proc.terminate()  # `ray start --block` stops the processes it started, then exits
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # anything left in its process group
        except ProcessLookupError:
            pass
        for pid in processes_naming(temp_dir):  # workers or job drivers in other sessions
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        log.close()
        shutil.rmtree(temp_dir, ignore_errors=True)


def submit(head, submission_id: str, driver_args: list[str]) -> str:
    """`ray job submit` (waits and streams the job's logs); returns them once the job SUCCEEDED."""
    command = [
        RAY,
        "job",
        "submit",
        f"--address={head['address']}",
        f"--submission-id={submission_id}",
        "--working-dir=.",
        f"--runtime-env-json={json.dumps({'excludes': EXCLUDES})}",
        "--",
        "python",
        "driver.py",
        *driver_args,
    ]
    done = subprocess.run(command, cwd=REPO, env=head["env"], capture_output=True, text=True, timeout=500)
    status, info = http(f"{head['address']}/api/jobs/{submission_id}", head["token"])
    assert status == 200 and info["status"] == "SUCCEEDED", f"{info}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def steps_logged(run_dir: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def test_unauthenticated_requests_are_refused(head):
    assert http(f"{head['address']}/api/jobs/")[0] == 401
    assert http(f"{head['address']}/api/jobs/", "not-the-token")[0] == 403


def test_job_submit_then_resume(head, tmp_path):
    out = tmp_path / "runs"
    logs = submit(head, "relay-first", ["training.steps=2", f"run.output_dir={out}", *RUN_ARGS])
    run_dir = out / "job"
    assert steps_logged(run_dir) == [1, 2]
    assert (run_dir / "checkpoints").is_dir()
    assert "resumed from" not in logs

    logs = submit(head, "relay-resumed", ["--resume", "training.steps=4", f"run.output_dir={out}", *RUN_ARGS])
    assert "resumed from" in logs and "at step 2" in logs
    assert steps_logged(run_dir) == [1, 2, 3, 4]

    # The dashboard's state API lists the run's named actors (dead now: the job has ended).
    status, body = http(
        f"{head['address']}/api/v0/actors?limit=1000&detail=true&filter_keys=name"
        f"&filter_predicates=%3D&filter_values=job/learner-0",
        head["token"],
    )
    assert status == 200, body
    learners = body["data"]["result"]["result"]
    assert len(learners) == 2  # one per job
    assert {a["ray_namespace"] for a in learners} == {"relay"}
    status, body = http(f"{head['address']}/api/v0/actors?limit=1000", head["token"])
    names = {a["name"] for a in body["data"]["result"]["result"]}
    assert "job/learner-0" in names and "job/rollout-0" not in names  # colocated: one actor is both
    assert "job/env-0" not in names  # a plain reward function runs inside the rollout workers: no EnvPool
