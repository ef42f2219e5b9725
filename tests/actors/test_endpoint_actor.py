"""A rollout worker serves the OpenAI-compatible endpoint from its engine (endpoint.enabled): on
loopback for a Ray relay started locally, behind the bearer token."""

import openai
import pytest
import ray

from actors.pools import actor_pools, connect
from relay.config import load_config
from relay.run.folder import resolve_model_path


def test_a_rollout_worker_serves_its_engine(tmp_path):
    cfg = load_config(None, [f"run.output_dir={tmp_path}", "endpoint.enabled=true", "resources.rollout.count=2"])
    connect(cfg)
    try:
        with actor_pools(cfg, resolve_model_path(cfg), "endpoint") as actors:
            addresses = ray.get([w.endpoint_address.remote() for w in actors.rollout])
            assert len({url for url, _ in addresses}) == 2  # one endpoint per worker
            for url, token in addresses:
                assert url.startswith("http://127.0.0.1:")
                client = openai.OpenAI(base_url=url, api_key=token, max_retries=0)
                assert [m.id for m in client.models.list()] == ["tiny"]
                reply = client.chat.completions.create(
                    model="tiny", messages=[{"role": "user", "content": "12+34"}], temperature=0
                )
                assert reply.choices[0].message.content == "46"
                with pytest.raises(openai.AuthenticationError):
                    openai.OpenAI(base_url=url, api_key="not-" + token, max_retries=0).models.list()
    finally:
        ray.shutdown()
