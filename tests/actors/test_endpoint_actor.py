"""A Ray relay starts locally and the run's actors listen on loopback only: nothing a run opens is
reachable from another machine unless a cluster is configured (relay_trainer/local_ray.py,
loopback_node). Its rollout workers serve the OpenAI-compatible endpoint from their engines
(endpoint.enabled) behind the run's one bearer token, which a worker that Ray restarted accepts too.

One local run serves both tests: its tool executors, endpoints and Ray's daemons are all up when the
listening sockets are counted, and starting a Ray and a run's actors takes seconds."""

import ipaddress
import os
import signal
from urllib.parse import urlsplit

import openai
import psutil
import pytest
import ray

from actors.restarts import wait_restarted
from relay.config import load_config
from relay.run.model_source import resolve_model_path
from relay_trainer.pools import actor_pools, connect


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    overrides = ["endpoint.enabled=true", "resources.rollout.count=2", "tools.enabled=true", "tools.sandbox=none"]
    cfg = load_config(None, [f"run.output_dir={tmp_path_factory.mktemp('runs')}", *overrides])
    assert cfg.resources.max_restarts > 0
    connect(cfg)  # no Ray is up here: relay starts its own, as `python driver.py` does
    try:
        path = resolve_model_path(cfg.model, cfg.task, cfg.tools, cfg.critic, cfg.reward_model)
        with actor_pools(cfg, path, "endpoint") as actors:
            yield actors
    finally:
        ray.shutdown()


def is_loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    return (getattr(address, "ipv4_mapped", None) or address).is_loopback  # ::ffff:127.0.0.1 too


def listening(pids: set[int]) -> list[tuple[int, str, int]]:
    return [
        (c.pid, c.laddr.ip, c.laddr.port)
        for c in psutil.net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN and c.pid in pids
    ]


def ask(url: str, token: str) -> str:
    client = openai.OpenAI(base_url=url, api_key=token, max_retries=0)
    assert [m.id for m in client.models.list()] == ["tiny"]
    reply = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "12+34"}], temperature=0)
    return reply.choices[0].message.content


def test_a_local_run_listens_on_loopback_only(local_run):
    assert local_run.tools  # the tool executors are up too
    # every process of this Ray: its daemons (GCS, raylet, agents) and the actors' workers
    pids = {p.pid for p in psutil.Process().children(recursive=True)}
    found = listening(pids)
    assert len(found) >= 3, found  # GCS, raylet, the metrics export at least
    urls = [url for url, _ in ray.get([w.endpoint_address.remote() for w in local_run.rollout])]
    endpoints = {urlsplit(url).port for url in urls}
    assert endpoints <= {port for _, _, port in found}, (endpoints, found)  # the workers' endpoints are counted too
    outward = [(pid, psutil.Process(pid).name(), ip, port) for pid, ip, port in found if not is_loopback(ip)]
    assert not outward, outward


def test_the_workers_of_a_run_serve_behind_one_token_kept_across_a_restart(local_run):
    addresses = ray.get([w.endpoint_address.remote() for w in local_run.rollout])
    assert len({url for url, _ in addresses}) == 2  # one endpoint per worker
    assert len({token for _, token in addresses}) == 1  # one token per run
    for url, token in addresses:
        assert url.startswith("http://127.0.0.1:")
        assert ask(url, token) == "46"
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=url, api_key="not-" + token, max_retries=0).models.list()

    # Ray rebuilds a killed worker from its constructor arguments: a new port, the same token
    worker, (_, token) = local_run.rollout[0], addresses[0]
    os.kill(ray.get(worker.__ray_call__.remote(lambda self: os.getpid())), signal.SIGKILL)
    assert wait_restarted(worker, timeout_s=120)
    url, again = ray.get(worker.endpoint_address.remote())
    assert again == token and ask(url, token) == "46"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=url, api_key=token[:-1], max_retries=0).models.list()
