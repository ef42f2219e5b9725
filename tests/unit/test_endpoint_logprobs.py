"""Top-k logprobs through the real `openai` client, served by the HF engine on the tiny model:
chat's top_logprobs and completions' logprobs, in OpenAI's layouts, from the distribution the
sampled logprob comes from; asking for them changes no sampled token; k above 20 is a 400 naming
the field, as is an engine without alternatives (relay/endpoint/protocol.py)."""

from __future__ import annotations

import copy
import math

import httpx
import openai
import pytest
import torch

from relay.endpoint.batcher import cut
from relay.endpoint.server import EndpointServer
from relay.engines.base import Completion, SamplingParams
from relay.engines.hf import HFEngine
from relay.models.tokenizer import build_tiny_tokenizer
from tests.agent_scripts import EOS, ScriptedEngine

ASK = [{"role": "user", "content": "12+34"}]


@pytest.fixture(scope="module")
def server(tiny_model_path):
    torch.set_num_threads(1)
    srv = EndpointServer(HFEngine(tiny_model_path), max_tokens=8, max_total_tokens=64)
    yield srv
    srv.shutdown()


def client(srv, url: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(base_url=url or srv.url + "/v1", api_key=srv.token, max_retries=0)


def test_chat_top_logprobs(server):
    c = client(server)
    plain = c.chat.completions.create(model="m", messages=ASK, temperature=0.8, seed=3, n=2, logprobs=True)
    reply = c.chat.completions.create(
        model="m", messages=ASK, temperature=0.8, seed=3, n=2, logprobs=True, top_logprobs=4
    )
    for p, choice in zip(plain.choices, reply.choices):
        assert choice.message.content == p.message.content  # the same sample, alternatives or not
        assert [t.logprob for t in choice.logprobs.content] == [t.logprob for t in p.logprobs.content]
        assert all(t.top_logprobs == [] for t in p.logprobs.content)
        for entry in choice.logprobs.content:
            top = entry.top_logprobs
            assert len(top) == 4 and [t.logprob for t in top] == sorted((t.logprob for t in top), reverse=True)
            assert all(t.bytes == list(t.token.encode()) for t in top)
            assert sum(math.exp(t.logprob) for t in top) <= 1 + 1e-5
            if entry.token in {t.token for t in top}:  # its own logprob, from the same distribution
                assert any(t.token == entry.token and abs(t.logprob - entry.logprob) < 1e-6 for t in top)
            else:
                assert entry.logprob <= top[-1].logprob + 1e-6
    greedy = c.chat.completions.create(model="m", messages=ASK, temperature=0, logprobs=True, top_logprobs=20)
    assert all(
        e.top_logprobs[0].token == e.token and len(e.top_logprobs) == 20 for e in greedy.choices[0].logprobs.content
    )


def test_completions_top_logprobs(server):
    c = client(server)
    plain = c.completions.create(model="m", prompt="12+34=", max_tokens=4, temperature=0, logprobs=0)
    done = c.completions.create(model="m", prompt="12+34=", max_tokens=4, temperature=0, logprobs=3)
    lp, choice = plain.choices[0].logprobs, done.choices[0]
    assert choice.text == plain.choices[0].text and lp.top_logprobs is None
    assert choice.logprobs.tokens == lp.tokens and choice.logprobs.token_logprobs == lp.token_logprobs
    for token, logprob, top in zip(lp.tokens, lp.token_logprobs, choice.logprobs.top_logprobs):
        assert 3 <= len(top) <= 4 and top[token] == logprob  # the k most likely, and the sampled one
        assert max(top.values()) == logprob  # greedy: the sampled token is the most likely


def test_an_episode_may_ask_for_alternatives(server):
    server.open(["alt"], SamplingParams(temperature=1.0, seed=11))
    try:
        reply = client(server, server.episode_url("alt")).chat.completions.create(
            model="m", messages=ASK, logprobs=True, top_logprobs=2
        )
    finally:
        [call] = server.close(["alt"])["alt"].calls
    entries = reply.choices[0].logprobs.content
    assert all(len(e.top_logprobs) == 2 for e in entries)
    assert call.choices[0].logprobs == [e.logprob for e in entries]  # what the learner trains on: unchanged


@pytest.mark.parametrize(
    "route, body, field, says",
    [
        ("chat/completions", {"messages": ASK, "logprobs": True, "top_logprobs": 21}, "top_logprobs", "20"),
        ("chat/completions", {"messages": ASK, "top_logprobs": 3}, "top_logprobs", "logprobs=true"),
        ("completions", {"prompt": "1", "logprobs": 21}, "logprobs", "20"),
    ],
)
def test_above_the_limit_is_a_400_naming_the_field(server, route, body, field, says):
    r = httpx.post(f"{server.url}/v1/{route}", json=body, headers={"Authorization": f"Bearer {server.token}"})
    error = r.json()["error"]
    assert r.status_code == 400 and error["param"] == field and says in error["message"], error
    with pytest.raises(openai.BadRequestError, match="top_logprobs"):  # the client says it too
        client(server).chat.completions.create(model="m", messages=ASK, logprobs=True, top_logprobs=21)


def test_an_engine_without_alternatives_refuses_them():
    tok = copy.deepcopy(build_tiny_tokenizer())
    srv = EndpointServer(ScriptedEngine(tok, lambda turn, text: "46" + EOS), max_tokens=8)
    try:
        c = client(srv)
        assert c.chat.completions.create(model="m", messages=ASK, logprobs=True).choices[0].logprobs.content
        with pytest.raises(openai.BadRequestError, match="top_logprobs: this endpoint's engine gives at most 0"):
            c.chat.completions.create(model="m", messages=ASK, logprobs=True, top_logprobs=1)
    finally:
        srv.shutdown()


def test_a_shared_call_gives_each_request_its_own_alternatives():
    top = [[(1, -0.1), (2, -2.0), (3, -3.0)]] * 3
    c = Completion([1, 1, 1], [-0.1] * 3, "length", top_logprobs=top)
    assert cut(c, 2, 1).top_logprobs == [[(1, -0.1)]] * 2 and cut(c, 2, 1).token_ids == [1, 1]
    assert cut(c, 5, 0).top_logprobs is None and cut(c, 5, 3).top_logprobs == top
