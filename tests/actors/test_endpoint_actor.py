"""A rollout worker serves the OpenAI-compatible endpoint from its engine (endpoint.enabled): on
loopback for a Ray relay started locally, behind the run's one bearer token, which a worker that
Ray restarted accepts too."""

import os
import signal

import openai
import pytest
import ray

from actors.restarts import wait_restarted
from relay.config import load_config
from relay.run.model_source import resolve_model_path
from relay_trainer.pools import actor_pools, connect


def ask(url: str, token: str) -> str:
    client = openai.OpenAI(base_url=url, api_key=token, max_retries=0)
    assert [m.id for m in client.models.list()] == ["tiny"]
    reply = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "12+34"}], temperature=0)
    return reply.choices[0].message.content


def test_the_workers_of_a_run_serve_behind_one_token_kept_across_a_restart(tmp_path):
    cfg = load_config(None, [f"run.output_dir={tmp_path}", "endpoint.enabled=true", "resources.rollout.count=2"])
    assert cfg.resources.max_restarts > 0
    connect(cfg)
    try:
        with actor_pools(cfg, resolve_model_path(cfg), "endpoint") as actors:
            addresses = ray.get([w.endpoint_address.remote() for w in actors.rollout])
            assert len({url for url, _ in addresses}) == 2  # one endpoint per worker
            assert len({token for _, token in addresses}) == 1  # one token per run
            for url, token in addresses:
                assert url.startswith("http://127.0.0.1:")
                assert ask(url, token) == "46"
                with pytest.raises(openai.AuthenticationError):
                    openai.OpenAI(base_url=url, api_key="not-" + token, max_retries=0).models.list()

            # Ray rebuilds a killed worker from its constructor arguments: a new port, the same token
            worker, (_, token) = actors.rollout[0], addresses[0]
            os.kill(ray.get(worker.__ray_call__.remote(lambda self: os.getpid())), signal.SIGKILL)
            assert wait_restarted(worker, timeout_s=120)
            url, again = ray.get(worker.endpoint_address.remote())
            assert again == token and ask(url, token) == "46"
            with pytest.raises(openai.AuthenticationError):
                openai.OpenAI(base_url=url, api_key=token[:-1], max_retries=0).models.list()

    finally:
        ray.shutdown()
