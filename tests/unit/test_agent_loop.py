"""The agent loop (relay/agent/loop.py): token-in, token-out across turns, limits, failures as data.

The central property: a Sample's response ids are exactly the engine's outputs interleaved with
observation ids, the loss mask covers exactly the engine's tokens, and decoding prompt + response
gives the chat template's rendering of the conversation. Checked with a scripted engine on two
templates (the tiny ChatML one and a Qwen2.5-style one with tools and <tool_call>) and with the
real HFEngine on the tiny model.
"""

from __future__ import annotations

import copy

import pytest

from relay.agent.loop import AgentLimits, AgentLoop
from relay.agent.metrics import tool_call_counts
from relay.engines.base import SamplingParams
from relay.envs.chat import ChatFormat
from relay.envs.math_tool import math_tool_reward
from relay.models.tokenizer import build_tiny_tokenizer
from relay.tools.calls import ParseResult, ToolCall
from relay.tools.parsers import get_parser
from relay.tools.registry import PythonTool, ToolRegistry, ToolResult
from tests.agent_scripts import (
    EOS,
    QWEN_LIKE_TEMPLATE,
    ScriptedEngine,
    calculator,
    check_exact,
    decoded,
    rendered,
)


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer()


@pytest.fixture(scope="module")
def qwen_tok(tok):
    t = copy.deepcopy(tok)
    t.chat_template = QWEN_LIKE_TEMPLATE
    return t


# ----------------------------------------------------------------------------------- tag (inline results)


def test_tag_tool_turns_are_token_exact(tok):
    script = lambda turn, text: ["<tool>print(37*48)</tool> and more", "1776" + EOS][turn]
    engine = ScriptedEngine(tok, script)
    loop = AgentLoop(engine, tok, AgentLimits(max_tokens_per_turn=40), parser=get_parser("tag"), run_tools=calculator)
    [s] = loop.run([{"prompt": "What is 37*48?", "ground_truth": "1776"}], SamplingParams(seed=0), n=1)
    check_exact(s, engine)
    assert s.finish_reason == "stop" and len(s.turn_spans) == 2
    assert (
        engine.outputs[0][1] == tok("<tool>print(37*48)</tool>", add_special_tokens=False).input_ids
    )  # cut at the stop string
    # The result continues the model's own message (the tag parser's protocol), then the model goes on.
    content = "<tool>print(37*48)</tool>\n<result>\n1776\n</result>\n1776"
    expect = rendered(tok, [{"role": "user", "content": "What is 37*48?"}, {"role": "assistant", "content": content}])
    assert decoded(tok, s) + "\n" == expect
    obs = s.response_ids[s.turn_spans[0][1] : s.turn_spans[1][0]]
    assert obs == tok("\n<result>\n1776\n</result>\n", add_special_tokens=False).input_ids  # only the delta
    assert s.tool_calls == [
        {"name": "python", "arguments": {"code": "print(37*48)"}, "ok": True, "error": None, "seconds": 0.01, "turn": 1}
    ]
    assert s.final_text == "1776" and math_tool_reward(s) == 1.0
    assert s.meta["agent"] == {"turns": 2, "tool_calls": 1, "tool_errors": 0, "tool_seconds": 0.01, "env_steps": 0}
    assert s.weight_version == 7 and s.group_id == 0


# ----------------------------------------------------------------------------------- hermes (tool turns)


def hermes_script(turn, text):
    call = '<tool_call>\n{"name": "python", "arguments": {"code": "print(6*7)"}}\n</tool_call>'
    return [call + EOS, "It is 42." + EOS][min(turn, 1)]


@pytest.mark.parametrize("template", ["chatml", "qwen"])
def test_hermes_tool_turns_match_the_template(tok, qwen_tok, template):
    t = tok if template == "chatml" else qwen_tok
    schemas = [PythonTool(lambda code: ToolResult(True, "")).schema()]
    engine = ScriptedEngine(t, hermes_script)
    loop = AgentLoop(
        engine,
        t,
        AgentLimits(max_tokens_per_turn=80),
        parser=get_parser("hermes"),
        run_tools=calculator,
        tool_schemas=schemas,
    )
    [s] = loop.run([{"prompt": "6*7?"}], SamplingParams(seed=0), n=1)
    check_exact(s, engine)
    first = engine.outputs[0][1]
    # stopped at </tool_call>: no EOS from the model, so the closing tokens are observation tokens
    assert t.decode(first).endswith("</tool_call>") and first[-1] != t.eos_token_id
    obs = t.decode(s.response_ids[s.turn_spans[0][1] : s.turn_spans[1][0]])
    assert obs.startswith(EOS + "\n<|im_start|>") and obs.endswith("<|im_start|>assistant\n") and "42" in obs
    conversation = [
        {"role": "user", "content": "6*7?"},
        {"role": "assistant", "content": t.decode(first)},
        {"role": "tool", "content": "42"},
        {"role": "assistant", "content": "It is 42."},
    ]
    expect = rendered(t, conversation, tools=schemas)
    assert decoded(t, s) + "\n" == expect
    if template == "qwen":
        assert "<tool_response>\n42\n</tool_response>" in decoded(t, s)


def test_turn_ended_with_eos_is_not_closed_twice(tok):
    # json calls have no end marker: the turn ends with EOS, which the delta must not repeat
    script = lambda turn, text: ['{"name": "python", "arguments": {"code": "print(2+2)"}}' + EOS, "4" + EOS][
        min(turn, 1)
    ]
    engine = ScriptedEngine(tok, script)
    loop = AgentLoop(engine, tok, AgentLimits(max_tokens_per_turn=80), parser=get_parser("json"), run_tools=calculator)
    [s] = loop.run([{"prompt": "2+2?"}], SamplingParams(), n=1)
    check_exact(s, engine)
    text = decoded(tok, s)
    assert text.count(EOS) == 4 and EOS + EOS not in text
    expect = rendered(
        tok,
        [
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": '{"name": "python", "arguments": {"code": "print(2+2)"}}'},
            {"role": "tool", "content": "4"},
            {"role": "assistant", "content": "4"},
        ],
    )
    assert text + "\n" == expect


def test_observation_delta_is_the_template_suffix(tok, qwen_tok):
    for t in (tok, qwen_tok):
        fmt = ChatFormat(t)
        assert fmt.turn_end == EOS + "\n"
        msgs = [{"role": "tool", "content": "a"}, {"role": "tool", "content": "b"}]
        after_stop = fmt.observation_text(msgs, eos_token=None)
        after_eos = fmt.observation_text(msgs, eos_token=t.eos_token_id)
        assert after_stop == EOS + after_eos
        base = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "x"}]
        full = t.apply_chat_template(base + msgs, tokenize=False, add_generation_prompt=True)
        assert full == t.apply_chat_template(base, tokenize=False)[: -len(fmt.turn_end)] + after_stop


# ----------------------------------------------------------------------------------- failures are data


def test_malformed_call_becomes_an_error_observation(tok):
    seen = []

    def script(turn, text):
        seen.append(text)
        return ['<tool_call>\n{"name": "python", "arguments": {"code": \n</tool_call>', "sorry" + EOS][min(turn, 1)]

    engine = ScriptedEngine(tok, script)
    ran = []
    loop = AgentLoop(
        engine,
        tok,
        AgentLimits(max_tokens_per_turn=80),
        parser=get_parser("hermes"),
        run_tools=lambda calls: ran.extend(calls) or calculator(calls),
    )
    [s] = loop.run([{"prompt": "hi"}], SamplingParams(), n=1)
    assert ran == []  # nothing to run
    assert s.finish_reason == "stop" and len(s.turn_spans) == 2
    assert "Error: tool call 1: invalid JSON" in seen[1]  # the model read it next turn
    assert s.tool_calls[0]["name"] is None and not s.tool_calls[0]["ok"] and "invalid JSON" in s.tool_calls[0]["error"]
    assert s.meta["agent"]["tool_errors"] == 1 and s.meta["agent"]["tool_calls"] == 0
    assert tool_call_counts([s]) == {"tools/calls": 1.0, "tools/errors": 1.0}  # made, and failed
    check_exact(s, engine)


def test_tool_call_cannot_raise_its_limits(tok):
    registry = ToolRegistry([PythonTool(lambda code: ToolResult(True, "ran\n"))])
    script = lambda turn, text: [
        '<tool_call>{"name": "python", "arguments": {"code": "1", "timeout": 99999}}</tool_call>',
        "ok" + EOS,
    ][min(turn, 1)]
    engine = ScriptedEngine(tok, script)
    loop = AgentLoop(
        engine,
        tok,
        AgentLimits(max_tokens_per_turn=120),
        parser=get_parser("hermes"),
        run_tools=lambda calls: [registry.call(c) for c in calls],
    )
    [s] = loop.run([{"prompt": "hi"}], SamplingParams(), n=1)
    assert not s.tool_calls[0]["ok"] and "unexpected argument 'timeout'" in s.tool_calls[0]["error"]


@pytest.fixture(scope="module")
def hf_engine(tiny_model_path):
    from relay.engines.hf import HFEngine

    return HFEngine(tiny_model_path)


class DigitCalls:
    """A test parser for the tiny model: any turn that reaches the stop string "1" is a call."""

    name = "digits"
    stop_strings = ("1",)

    def __init__(self, result_role):
        self.result_role = result_role

    def parse(self, text):
        return ParseResult(calls=[ToolCall("python", {"code": "print(0)"}, text)] if text.endswith("1") else [])

    def format_result(self, call, result_text):
        return f"[{result_text}]" if self.result_role is None else result_text


class Recording:
    def __init__(self, engine):
        self.engine, self.outputs = engine, []

    @property
    def weight_version(self):
        return self.engine.weight_version

    def generate(self, prompts, sampling):
        groups = self.engine.generate(prompts, sampling)
        for prompt, [c] in zip(prompts, groups):
            self.outputs.append((list(prompt), list(c.token_ids), list(c.logprobs)))
        return groups


@pytest.mark.parametrize("template,role", [("chatml", "tool"), ("chatml", None), ("qwen", "tool")])
def test_real_engine_tokens_trained_are_tokens_sampled(hf_engine, qwen_tok, template, role):
    tokenizer = hf_engine.tokenizer if template == "chatml" else qwen_tok
    saved = hf_engine.tokenizer
    hf_engine.tokenizer = tokenizer  # the engine decodes stop strings with it
    try:
        engine = Recording(hf_engine)
        results = lambda calls: [ToolResult(True, "0\n") for _ in calls]
        loop = AgentLoop(
            engine,
            tokenizer,
            AgentLimits(max_turns=4, max_tool_turns=3, max_tokens_per_turn=6, max_total_tokens=80),
            parser=DigitCalls(role),
            run_tools=results,
        )
        # Sums with a 1 and no carry (the tiny model adds these right): turns reach the stop string.
        rows = [{"prompt": f"{a}+{b}"} for a, b in ((10, 1), (20, 11), (51, 60), (41, 30))]
        samples = loop.run(rows, SamplingParams(temperature=1.0, seed=3), n=4)
    finally:
        hf_engine.tokenizer = saved
    assert sum(len(s.turn_spans) > 1 for s in samples) >= 2, [s.finish_reason for s in samples]  # some called
    for s in samples:
        check_exact(s, engine, allow_cut_last=s.finish_reason == "budget")
        assert s.turn_spans[-1][1] == len(s.response_ids)  # nothing after the last model turn
        # decoding the whole sequence is the template's rendering of the conversation
        conversation, inline = [{"role": "user", "content": rows[s.group_id]["prompt"]}], ""
        for k, (start, end) in enumerate(s.turn_spans):
            ids = s.response_ids[start:end]
            ended_eos = bool(ids) and ids[-1] == tokenizer.eos_token_id
            text = tokenizer.decode(ids[:-1] if ended_eos else ids)
            if k + 1 < len(s.turn_spans) and role is None:  # the result continues the message
                inline += text + "[0]"
                continue
            conversation.append({"role": "assistant", "content": inline + text})
            inline = ""
            if k + 1 < len(s.turn_spans):
                conversation.append({"role": "tool", "content": "0"})
        last = s.response_ids[-1:]
        tail = "\n" if last == [tokenizer.eos_token_id] else EOS + "\n"
        assert decoded(tokenizer, s) + tail == rendered(tokenizer, conversation)


class RaisingParser:
    """A parser with a bug that hostile text reaches (as RecursionError reached function_call's)."""

    name, stop_strings, result_role = "raising", (), "tool"

    def parse(self, text: str) -> ParseResult:
        if "[" in text:
            raise RecursionError("maximum recursion depth exceeded")
        return ParseResult()

    def format_result(self, call: ToolCall, result_text: str) -> str:
        return result_text


@pytest.mark.parametrize(
    "parser, turn",
    [
        (RaisingParser(), "[f(a=1)]"),
        (get_parser("function_call"), "[f(a=" + "-" * 400 + "1)]"),
        (get_parser("hermes"), '<tool_call>{"name": "python", "arguments": {"code": ' + "[" * 40 + "]" * 40 + "}}"),
    ],
    ids=["parser-raises", "deep-unary", "deep-arguments"],
)
def test_a_turn_no_parser_can_read_is_an_error_the_model_reads(tok, parser, turn):
    seen = []

    def script(k, text):
        seen.append(text)
        return [turn + EOS, "sorry" + EOS][min(k, 1)]

    engine = ScriptedEngine(tok, script)
    ran = []
    loop = AgentLoop(
        engine, tok, AgentLimits(max_tokens_per_turn=1000, max_total_tokens=4000), parser=parser, run_tools=ran.extend
    )
    [s] = loop.run([{"prompt": "hi"}], SamplingParams(), n=1)
    assert ran == [] and s.finish_reason == "stop" and len(s.turn_spans) == 2
    assert s.tool_calls[0]["name"] is None and not s.tool_calls[0]["ok"]
    assert "Error: " in seen[1]  # the model read why, next turn
