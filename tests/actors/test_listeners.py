"""A locally started Ray and relay's actors listen on loopback only: nothing a run opens is
reachable from another machine unless a cluster is configured (relay_trainer/local_ray.py, loopback_node)."""

import ipaddress

import psutil
import ray

from relay.config import load_config
from relay.run.model_source import resolve_model_path
from relay_trainer.pools import actor_pools, connect


def is_loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    return (getattr(address, "ipv4_mapped", None) or address).is_loopback  # ::ffff:127.0.0.1 too


def listening(pids: set[int]) -> list[tuple[int, str, int]]:
    return [
        (c.pid, c.laddr.ip, c.laddr.port)
        for c in psutil.net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN and c.pid in pids
    ]


def test_a_local_run_listens_on_loopback_only(tmp_path):
    cfg = load_config(None, [f"run.output_dir={tmp_path}", "tools.enabled=true", "tools.sandbox=none"])
    connect(cfg)
    try:
        with actor_pools(cfg, resolve_model_path(cfg), "listen") as actors:
            assert actors.tools  # the tool executors are up too
            # every process of this Ray: its daemons (GCS, raylet, agents) and the actors' workers
            pids = {p.pid for p in psutil.Process().children(recursive=True)}
            found = listening(pids)
            assert len(found) >= 3, found  # GCS, raylet, the metrics export at least
            outward = [(pid, psutil.Process(pid).name(), ip, port) for pid, ip, port in found if not is_loopback(ip)]
            assert not outward, outward
    finally:
        ray.shutdown()
