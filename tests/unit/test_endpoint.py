"""The OpenAI-compatible endpoint through the real `openai` client: auth, bad requests, token-exact
records of agent programs (one tool, two calls, rewritten history), 64 concurrent episodes.

The tiny model serves most tests (relay/models/shipped/tiny). The tool-calling test scripts the
engine's text (tests/agent_scripts.py), since the tiny model never learned Hermes tool calls: it
checks what the endpoint makes of such text, token for token."""

from __future__ import annotations

import copy
import json

import httpx
import openai
import pytest
import torch

from relay.endpoint.program import run_agent_programs
from relay.endpoint.samples import AgentOutcome, episode_samples
from relay.endpoint.server import EndpointServer
from relay.engines.base import SamplingParams
from relay.engines.hf import HFEngine
from relay.models.tokenizer import build_tiny_tokenizer
from tests.agent_scripts import EOS, QWEN_LIKE_TEMPLATE, ScriptedEngine, check_exact

ROLLOUT = SamplingParams(temperature=1.0, seed=11)


@pytest.fixture(scope="module")
def server(tiny_model_path):
    torch.set_num_threads(1)
    srv = EndpointServer(HFEngine(tiny_model_path), max_tokens=8, max_total_tokens=64)
    yield srv
    srv.shutdown()


def client(srv, episode: str | None = None, key: str | None = None) -> openai.OpenAI:
    url = srv.episode_url(episode) if episode else srv.url + "/v1"
    return openai.OpenAI(base_url=url, api_key=key or srv.token, max_retries=0)


def episode(srv, program, eid: str, row: dict | None = None):
    """Run `program(client, row)` as one episode; its outcome and record."""
    srv.open([eid], ROLLOUT)
    try:
        [outcome] = run_agent_programs(program, [(eid, row or {}, srv.episode_url(eid))], srv.token)
    finally:
        record = srv.close([eid])[eid]
    return outcome, record


# ------------------------------------------------------------------------------ serving and auth


def test_models_chat_and_completions(server):
    c = client(server)
    assert [m.id for m in c.models.list()] == ["relay"]
    reply = c.chat.completions.create(
        model="any", messages=[{"role": "user", "content": "12+34"}], temperature=0, logprobs=True
    )
    choice = reply.choices[0]
    assert choice.message.role == "assistant" and choice.message.content == "46"  # the warm start adds
    assert choice.finish_reason == "stop" and len(choice.logprobs.content) == reply.usage.completion_tokens
    assert all(t.logprob <= 0 for t in choice.logprobs.content)
    done = c.completions.create(model="any", prompt="12", max_tokens=3, n=2, seed=5)
    assert len(done.choices) == 2 and done.usage.completion_tokens <= 6


def test_token_auth(server):
    for key in ("wrong", server.token + "x"):
        with pytest.raises(openai.AuthenticationError, match="Bearer"):
            client(server, key=key).models.list()
    r = httpx.get(server.url + "/v1/models")  # no Authorization header at all
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"


@pytest.mark.parametrize(
    "body, field",
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "user", "content": "1"}], "temperature": 5}, "temperature"),
        ({"messages": [{"role": "user", "content": "1"}], "max_tokens": 0}, "max_tokens"),
        ({"messages": [{"role": "user", "content": "1"}], "response_format": {}}, "response_format"),
        ({"messages": [{"role": "user", "content": "1"}], "stream": True}, "stream"),
        ({"messages": [{"role": "user", "content": "1"}], "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"messages": [{"role": "user", "content": "1"}], "tool_choice": "required"}, "tool_choice"),
        ({"messages": [{"role": "user", "content": "1"}], "tools": [{"type": "web"}]}, "tools"),
        ({"messages": [{"role": "wizard", "content": "1"}]}, "messages"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages"),
        ({"messages": [{"role": "user", "content": "1"}], "presence_penalty": 0.5}, "presence_penalty"),
        ([1, 2], None),
    ],
)
def test_bad_requests_are_openai_400s(server, body, field):
    r = httpx.post(server.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {server.token}"})
    error = r.json()["error"]
    assert r.status_code == 400 and error["type"] == "invalid_request_error", error
    assert error["param"] == field and "\n" not in error["message"] and "Traceback" not in error["message"]


def test_other_bad_requests(server):
    auth = {"Authorization": f"Bearer {server.token}"}
    r = httpx.post(server.url + "/v1/chat/completions", content=b"{not json", headers=auth)
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    r = httpx.post(server.url + "/v1/completions", json={"prompt": [10**9]}, headers=auth)
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"
    assert httpx.get(server.url + "/v2/nothing", headers=auth).status_code == 404
    with pytest.raises(openai.NotFoundError, match="episode 'gone' is not running"):
        client(server, "gone").chat.completions.create(model="m", messages=[{"role": "user", "content": "1"}])
    with pytest.raises(openai.BadRequestError, match="messages.0.content"):  # through the client too
        client(server).chat.completions.create(model="m", messages=[{"role": "user", "content": [{"type": "audio"}]}])


# ------------------------------------------------------------------------------ agent programs


def ask_twice(c, row):
    messages = [{"role": "user", "content": row["prompt"]}]
    first = c.chat.completions.create(model="policy", messages=messages, logprobs=True)
    messages += [first.choices[0].message, {"role": "user", "content": "Again."}]
    second = c.chat.completions.create(model="policy", messages=messages, logprobs=True)
    return {"reward": 1.0, "replies": [first.model_dump(), second.model_dump()]}


def test_a_two_call_agent_trains_on_the_tokens_it_was_served(server):
    outcome, record = episode(server, ask_twice, "two", {"prompt": "12+34", "ground_truth": "46"})
    assert outcome.error is None and outcome.reward == 1.0 and record.splits == 0
    first, second = record.calls
    assert second.parent == (0, 0)  # continued, never re-rendered
    assert second.drift is False  # ChatML re-renders this history to the same ids: nothing to lose here
    assert second.prompt_ids[: len(first.prompt_ids) + len(first.choices[0].token_ids)] == (
        first.prompt_ids + first.choices[0].token_ids
    )
    [sample] = episode_samples(record, outcome, {"ground_truth": "46"}, 3, server.tokenizer)
    served = [[t["logprob"] for t in reply["choices"][0]["logprobs"]["content"]] for reply in outcome.info["replies"]]
    spans = sample.turn_spans
    assert [sample.rollout_logprobs[a:b] for a, b in spans] == served  # what the client was told, trained on
    assert sample.loss_mask == [1] * spans[0][1] + [0] * (spans[1][0] - spans[0][1]) + [1] * (spans[1][1] - spans[1][0])
    # nothing re-tokenized: the text between the two replies is the template's, exactly
    fed = server.tokenizer.decode(sample.response_ids[spans[0][1] : spans[1][0]])
    assert fed == "\n<|im_start|>user\nAgain.<|im_end|>\n<|im_start|>assistant\n"  # after the model's own <|im_end|>
    assert sample.group_id == 3 and sample.meta["agent"]["calls"] == 2


def rewrites_history(c, row):
    messages = [{"role": "user", "content": "12+34"}]
    first = c.chat.completions.create(model="policy", messages=messages)
    summary = f"Earlier you said {first.choices[0].message.content!r}. Check it."  # a rewritten history
    c.chat.completions.create(model="policy", messages=[{"role": "user", "content": summary}])
    return 0.5


def test_an_agent_that_rewrites_its_history_is_split(server):
    outcome, record = episode(server, rewrites_history, "rewrite")
    assert record.splits == 1 and [c.parent for c in record.calls] == [None, None]
    samples = episode_samples(record, outcome, {}, 0, server.tokenizer)
    assert len(samples) == 2 and all(s.meta["agent"]["splits"] == 1 for s in samples)
    for s, call in zip(samples, record.calls):  # each sample: one call, its own exact prompt
        assert s.prompt_ids == call.prompt_ids and s.response_ids == call.choices[0].token_ids


def test_completions_continue_by_text(server):
    def program(c, row):
        first = c.completions.create(model="m", prompt="12+34=", max_tokens=4, stop=["\n"])
        c.completions.create(model="m", prompt="12+34=" + first.choices[0].text + "\n56+1=", max_tokens=4)
        return 1

    _, record = episode(server, program, "text")
    first, second = record.calls
    assert second.parent == (0, 0)
    assert second.prompt_ids[: len(first.prompt_ids) + len(first.choices[0].token_ids)] == (
        first.prompt_ids + first.choices[0].token_ids
    )


def test_an_episode_has_a_token_budget(server):
    def program(c, row):
        messages = [{"role": "user", "content": "1+1"}]
        for _ in range(20):  # 64 response tokens per chain: this runs out
            reply = c.chat.completions.create(model="m", messages=messages)
            messages += [reply.choices[0].message, {"role": "user", "content": "More."}]
        return 1.0

    outcome, record = episode(server, program, "budget")
    assert "rollout.max_total_tokens" in outcome.error and "BadRequestError" in outcome.error
    [sample] = episode_samples(record, outcome, {}, 0, server.tokenizer)
    assert len(sample.response_ids) <= 64 and sample.meta["agent_result"]["error"] == outcome.error


def test_program_outcomes():
    def bad(c, row):
        raise ValueError("no luck")

    cases = [(lambda c, r: {"reward": 2, "note": "x"}, 2.0, None), (bad, None, "raised ValueError: no luck")]
    cases += [(lambda c, r: float("nan"), None, "not a finite number"), (lambda c, r: {"r": 1}, None, "'reward'")]
    for program, reward, error in cases:
        [out] = run_agent_programs(program, [("e", {}, "http://127.0.0.1:9/v1")], "k")
        assert out.reward == reward and (error is None) == (out.error is None)
        assert error is None or error in out.error
    assert out == AgentOutcome(error=out.error)


def test_64_concurrent_episodes_share_engine_calls(server):
    rows = [{"prompt": f"{10 + i}+{20 + i}", "ground_truth": str(30 + 2 * i)} for i in range(8)]
    ids = [f"many-{i}" for i in range(64)]

    async def async_program(c, row):
        reply = await c.chat.completions.create(model="policy", messages=[{"role": "user", "content": row["prompt"]}])
        return float(reply.choices[0].message.content.strip() == row["ground_truth"])

    def sync_program(c, row):
        reply = c.chat.completions.create(model="policy", messages=[{"role": "user", "content": row["prompt"]}])
        return float(reply.choices[0].message.content.strip() == row["ground_truth"])

    for program in (sync_program, async_program):
        before = server.queue.batches
        eids = [f"{program.__name__}-{e}" for e in ids]
        server.open(eids, ROLLOUT)
        outcomes = run_agent_programs(
            program, [(e, rows[i % 8], server.episode_url(e)) for i, e in enumerate(eids)], server.token
        )
        records = server.close(eids)
        assert all(o.error is None for o in outcomes) and sum(o.reward for o in outcomes) > 16
        assert all(len(r.calls) == 1 for r in records.values())
        assert server.queue.batches - before < 32  # batched: far fewer engine calls than requests


# ------------------------------------------------------------------------------ one tool (scripted text)


CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
    },
}


def calculator(expression: str) -> str:
    return str(eval(expression, {"__builtins__": {}}))  # the agent's own tool: digits and operators here


def tool_agent(c, row):
    messages = [{"role": "user", "content": "What is 37*48?"}]
    reply = c.chat.completions.create(model="policy", messages=messages, tools=[CALCULATOR])
    message = reply.choices[0].message
    assert reply.choices[0].finish_reason == "tool_calls" and message.tool_calls[0].function.name == "calculator"
    messages.append(message)
    for call in message.tool_calls:
        result = calculator(**json.loads(call.function.arguments))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    final = c.chat.completions.create(model="policy", messages=messages, tools=[CALCULATOR])
    return float(final.choices[0].message.content == "1776")


def test_a_tool_calling_agent_is_token_exact():
    tok = copy.deepcopy(build_tiny_tokenizer())
    tok.chat_template = QWEN_LIKE_TEMPLATE
    call = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "37*48"}}\n</tool_call>'
    engine = ScriptedEngine(tok, lambda turn, text: [call + EOS, "1776" + EOS][turn])
    srv = EndpointServer(engine, parser="hermes", max_tokens=256, max_total_tokens=1024)
    try:
        outcome, record = episode(srv, tool_agent, "tool")
    finally:
        srv.shutdown()
    assert outcome.error is None and outcome.reward == 1.0 and record.splits == 0
    [sample] = episode_samples(record, outcome, {}, 0, tok)
    check_exact(sample, engine)  # each turn is one engine call's ids and logprobs, for exactly its history
    # re-rendering the history would have lost the call as the model wrote it (the template shows content only)
    assert record.calls[1].drift is True
    assert [c["name"] for c in sample.tool_calls] == ["calculator"]
    conversation = [
        {"role": "user", "content": "What is 37*48?"},
        {"role": "assistant", "content": call},
        {"role": "tool", "content": "1776"},
        {"role": "assistant", "content": "1776"},
    ]
    expected = tok.apply_chat_template(conversation, tools=[CALCULATOR], tokenize=False)
    assert (
        tok.decode(sample.prompt_ids + sample.response_ids) + "\n" == expected
    )  # the template ends a turn with a newline


# ------------------------------------------------------------------------------ config


def one_argument(client):
    return 1.0


def test_config_checks_name_the_key():
    from relay.config import ConfigError, load_config

    assert load_config(None, ["task.agent=relay.endpoint.example_agent:run"]).task.agent
    bad = [
        "task.agent=tests.unit.test_endpoint:one_argument",
        "task.env=relay.envs.textgame:TextGame",
        "tools.enabled=true",
        "endpoint.parser=yaml",
        "endpoint.port=70000",
    ]
    with pytest.raises(ConfigError) as e:
        load_config(None, bad)
    problems = "\n".join(e.value.problems)
    for line in (
        "task.agent: one_argument(client): an agent program takes (client, row)",
        "task.env: not with task.agent",
        "tools.enabled: not with task.agent",
        "endpoint.parser: unknown tool parser 'yaml'",
        "endpoint.port: must be in [0, 65535]",
    ):
        assert line in problems, problems
    with pytest.raises(ConfigError, match="task.agent: cannot load 'no_such_module:run'"):
        load_config(None, ["task.agent=no_such_module:run"])


def test_the_readme_agent_runs_as_written():
    """README.md's "Train your agent program" example, executed as it stands there."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    code = readme.split("# my_agent.py:", 1)[1].split("\n", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    tok = copy.deepcopy(build_tiny_tokenizer())
    tok.chat_template = QWEN_LIKE_TEMPLATE
    call = '<tool_call>\n{"name": "add", "arguments": {"numbers": [12, 34]}}\n</tool_call>'
    engine = ScriptedEngine(tok, lambda turn, text: [call + EOS, "46" + EOS][turn])
    srv = EndpointServer(engine, parser="hermes", max_tokens=256, max_total_tokens=1024)
    try:
        outcome, record = episode(srv, namespace["run"], "readme", {"prompt": "12+34", "ground_truth": "46"})
    finally:
        srv.shutdown()
    assert outcome.error is None and outcome.reward == 1.0
    assert len(record.calls) == 2 and record.calls[1].parent == (0, 0) and record.splits == 0


def test_the_models_context_bounds_a_request(server):
    c = client(server)
    context = server.tokenizer.model_max_length  # 1024 for the tiny model
    with pytest.raises(openai.BadRequestError, match=f"the model's context is {context}"):
        c.completions.create(model="m", prompt=[5] * context)
    reply = c.completions.create(model="m", prompt=[5] * (context - 3), max_tokens=50, temperature=1.0)
    assert reply.usage.completion_tokens <= 3


def test_calls_marked_by_special_tokens_are_read(tiny_model_path):
    """Mistral marks calls with the special tokens [TOOL_CALLS] and [ARGS], which a decode that skips
    special tokens drops: the endpoint gives such parsers the turn with them, and the reply's content
    without them."""
    tok = copy.deepcopy(build_tiny_tokenizer())
    tok.add_special_tokens({"additional_special_tokens": ["[TOOL_CALLS]", "[ARGS]"]})
    call = '[TOOL_CALLS]calculator[ARGS]{"expression": "37*48"}'
    assert tok.decode(tok(call).input_ids, skip_special_tokens=True) == 'calculator{"expression": "37*48"}'
    engine = ScriptedEngine(tok, lambda turn, text: [call + EOS, "1776" + EOS][turn])
    srv = EndpointServer(engine, parser="mistral", max_tokens=256, max_total_tokens=1024)
    try:
        outcome, record = episode(srv, tool_agent, "special")
    finally:
        srv.shutdown()
    assert outcome.error is None and outcome.reward == 1.0
    assert record.calls[0].choices[0].message == {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"name": "calculator", "arguments": {"expression": "37*48"}}],
    }
