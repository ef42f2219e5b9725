"""Stop the one-machine autoscaling cluster of cluster.local.yaml, and nothing else.

    python scripts/local_cluster.py stop /tmp/relay-local      # the head's --temp-dir

Ends every process of the Ray started with that --temp-dir: the head's daemons (GCS, raylet,
autoscaler, dashboard), the nodes the autoscaler added (their raylets name the head's session
folder), and every process they started (agents, actors, the drivers of submitted jobs).
`ray stop` would end them too, but also every other Ray on the machine: another cluster, or a
run started with a plain `python driver.py`.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

import yaml

# isort: off
import ray  # noqa: F401  (first: it puts its own psutil, in ray/thirdparty_files, on the path)
import psutil
# isort: on


def names_folder(cmdline: list[str], folder: str) -> bool:
    """Whether a command line names `folder` or a path inside it (not /tmp/relay-local2 for /tmp/relay-local)."""
    return any(arg == folder or arg.endswith("=" + folder) or folder + "/" in arg for arg in cmdline)


def cluster_processes(temp_dir: str) -> list[psutil.Process]:
    """The processes whose command line names `temp_dir`, with all their descendants (Ray renames
    its workers `ray::...`, so only their ancestors name the folder); never this process or its
    ancestors (the shell that ran this script names the folder too)."""
    folder = os.path.realpath(temp_dir)
    me = psutil.Process()
    spared = {me.pid, *(p.pid for p in me.parents())}
    found: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter(["cmdline"]):
        if proc.pid not in spared and names_folder(proc.info["cmdline"] or [], folder):
            found[proc.pid] = proc
            try:
                found.update((child.pid, child) for child in proc.children(recursive=True))
            except psutil.NoSuchProcess:
                pass
    return [p for pid, p in found.items() if pid not in spared]


def stop(temp_dir: str, grace_s: float = 10.0) -> int:
    """SIGTERM every process of the cluster, SIGKILL what is left after `grace_s`; returns how many there were."""
    procs = cluster_processes(temp_dir)
    for proc in procs:
        try:
            proc.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)
    return len(procs)


# -- a cluster of one's own, for tests and benchmarks (tests/e2e/test_local_cluster.py, benchmarks/elastic.py)

REPO = Path(__file__).resolve().parents[1]
HEAD = "ray.head.default"  # the fake provider's name for the head's node type


@dataclass
class LocalCluster:
    temp_dir: str
    gcs_address: str  # 127.0.0.1:<port>: ray.init(address=...) and the nodes the autoscaler adds
    address: str  # the dashboard: jobs, the state API, the autoscaler's report
    token: str
    env: dict  # for `ray` CLI calls and ray.init from this machine: the token mode and path


def start(config: dict | None = None, idle_timeout_s: float | None = None) -> LocalCluster:
    """A head with the autoscaler of `config` (cluster.local.yaml's, as a dict: default the file),
    on free ports, in its own short temp folder, with its own token; back once the dashboard
    answers and the autoscaler has reported. Stop it with `stop(cluster.temp_dir)`. Another Ray may hold Ray's default ports and
    ~/.ray/auth_token, so neither is used."""
    config = config or yaml.safe_load((REPO / "cluster.local.yaml").read_text())
    temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: unix socket paths
    gcs, dashboard, client, agent_http, agent_grpc, metrics = free_ports(6)
    config["provider"]["gcs_address"] = f"127.0.0.1:{gcs}"  # where the added nodes find the GCS
    if idle_timeout_s is not None:
        config["idle_timeout_minutes"] = idle_timeout_s / 60
    (Path(temp_dir) / "cluster.yaml").write_text(yaml.safe_dump(config))
    token = uuid.uuid4().hex
    (Path(temp_dir) / "auth_token").write_text(token)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN")}
    env.update(
        RAY_FAKE_CLUSTER="1",
        AUTOSCALER_UPDATE_INTERVAL_S="1",  # the autoscaler looks every second, not every 5
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN_PATH=str(Path(temp_dir) / "auth_token"),
        RAY_USAGE_STATS_ENABLED="0",
        PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}",  # a job's `python` is this venv's
        # the autoscaler can import a provider from this checkout (scripts/local_provider.py)
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p),
        PYTHONUNBUFFERED="1",
    )
    head_cpus = config["available_node_types"][HEAD]["resources"]["CPU"]
    command = [
        str(Path(sys.executable).with_name("ray")), "start", "--head", "--disable-usage-stats",
        f"--temp-dir={temp_dir}", f"--autoscaling-config={temp_dir}/cluster.yaml", f"--num-cpus={head_cpus}",
        f"--port={gcs}", "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}",
        f"--ray-client-server-port={client}", f"--dashboard-agent-listen-port={agent_http}",
        f"--dashboard-agent-grpc-port={agent_grpc}", f"--metrics-export-port={metrics}",
    ]  # fmt: skip
    cluster = LocalCluster(temp_dir, f"127.0.0.1:{gcs}", f"http://127.0.0.1:{dashboard}", token, env)
    try:
        started = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
        if started.returncode != 0:
            raise RuntimeError(f"ray start --head failed:\n{started.stdout[-3000:]}{started.stderr[-3000:]}")
        deadline = time.monotonic() + 60
        while http(f"{cluster.address}/api/jobs/", token)[0] != 200:
            if time.monotonic() > deadline:
                raise RuntimeError("ray start --head: the dashboard did not come up within 60 s")
            time.sleep(1)
        # the dashboard answers before the autoscaler's first report is in (its status has no
        # autoscalerReport yet): up means both
        while not autoscaler_reported(cluster):
            if time.monotonic() > deadline:
                raise RuntimeError("ray start --head: the autoscaler did not report within 60 s")
            time.sleep(1)
    except BaseException:
        stop(temp_dir, grace_s=5)
        raise
    return cluster


def autoscaler_reported(cluster: LocalCluster) -> bool:
    status, body = http(f"{cluster.address}/api/cluster_status?format=0", cluster.token)
    return status == 200 and isinstance(body, dict) and "autoscalerReport" in body.get("data", {}).get("clusterStatus", {})


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def http(url: str, token: str | None = None) -> tuple[int, dict | str]:
    """(status, JSON body or text); status 0 while nothing listens."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            body, status = response.read().decode(), response.status
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as e:
        return 0, str(e)
    try:
        return status, json.loads(body)
    except json.JSONDecodeError:
        return status, body


def get(cluster: LocalCluster, path: str):
    """A dashboard GET; its answer (the state and status APIs wrap theirs in `data`, the jobs API not)."""
    status, body = http(cluster.address + path, cluster.token)
    if status != 200:
        raise RuntimeError(f"GET {path}: {status} {str(body)[:500]}")
    return body.get("data", body)


def active_types(cluster: LocalCluster) -> dict[str, int]:
    """The autoscaler's own view: node type -> active nodes (what `ray status` prints)."""
    report = get(cluster, "/api/cluster_status?format=0")["clusterStatus"]["autoscalerReport"]
    # the dashboard camel-cases every key of the report, node type names too: rollout_worker -> rolloutWorker
    return {camel(node_type): n for node_type, n in (report["activeNodes"] or {}).items()}


def camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part.title() for part in rest)


def gcs_nodes(cluster: LocalCluster) -> list[dict]:
    """The GCS node table, dead nodes included with their start and end times."""
    return get(cluster, "/api/v0/nodes?detail=true&limit=100")["result"]["result"]


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "stop":
        print(__doc__.strip(), file=sys.stderr)
        return 2
    if not os.path.isdir(argv[1]):
        print(f"relay: {argv[1]} is not a folder: give the head's --temp-dir", file=sys.stderr)
        return 1
    print(f"relay: stopped {stop(argv[1])} processes of the cluster in {argv[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
