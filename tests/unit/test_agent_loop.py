"""The agent loop (relay/agent.py): token-in, token-out across turns, limits, failures as data.

The central property: a Sample's response ids are exactly the engine's outputs interleaved with
observation ids, the loss mask covers exactly the engine's tokens, and decoding prompt + response
gives the chat template's rendering of the conversation. Checked with a scripted engine on two
templates (the tiny ChatML one and a Qwen2.5-style one with tools and <tool_call>) and with the
real HFEngine on the tiny model.
"""

from __future__ import annotations

import copy

import pytest

from relay.agent import AgentLimits, AgentLoop, episode_metrics, tool_call_counts
from relay.chat import ChatFormat, encode_scripted
from relay.engines.base import Completion, SamplingParams
from relay.envs.base import EnvRunner, episode_return
from relay.envs.math_tool import MathToolEnv, math_tool_reward
from relay.envs.textgame import WEAPONS, TextGameEnv
from relay.models.tokenizer import build_tiny_tokenizer
from relay.tools.parsers import ParseResult, ToolCall, get_parser
from relay.tools.registry import PythonTool, ToolRegistry, ToolResult

EOS = "<|im_end|>"

# A Qwen2.5-style template, written for these tests: tools in the system turn, calls as
# <tool_call> JSON, tool results as <tool_response> blocks inside one user turn.
QWEN_LIKE_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content }}{%- else %}{{- 'You are a helpful assistant.' }}{%- endif %}"
    "{{- '\\n\\n# Tools\\n\\nYou may call functions. Signatures inside <tools></tools>:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    '{{- \'\\n</tools>\\n\\nReturn each call as <tool_call>\\n{"name": <name>, "arguments": <json>}\\n</tool_call><|im_end|>\\n\' }}'
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- elif message.role != 'system' or not loop.first %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer()


@pytest.fixture(scope="module")
def qwen_tok(tok):
    t = copy.deepcopy(tok)
    t.chat_template = QWEN_LIKE_TEMPLATE
    return t


class ScriptedEngine:
    """Deterministic engine: `script(turn_index, prompt_text)` gives the text a turn would write;
    stop strings, EOS and max_tokens cut it the way a real engine does. Records every call."""

    weight_version = 7

    def __init__(self, tokenizer, script):
        self.tokenizer, self.script = tokenizer, script
        self.outputs: list[tuple[list[int], list[int], list[float]]] = []  # (prompt ids, completion ids, logprobs)

    def generate(self, prompts, sampling):
        out = []
        for prompt in prompts:
            # this episode's turn: how many distinct earlier prompts its history extends
            turn = len({tuple(p) for p, _, _ in self.outputs if len(p) < len(prompt) and prompt[: len(p)] == p})
            ids = self.tokenizer(self.script(turn, self.tokenizer.decode(prompt)), add_special_tokens=False).input_ids
            reason = "length"
            for i in range(len(ids)):
                piece = self.tokenizer.decode(ids[: i + 1])
                if ids[i] == self.tokenizer.eos_token_id or any(piece.endswith(s) for s in sampling.stop):
                    ids, reason = ids[: i + 1], "stop"
                    break
            if len(ids) > sampling.max_tokens:
                ids, reason = ids[: sampling.max_tokens], "length"
            logprobs = [-0.01 * (k + 1) for k in range(len(ids))]
            self.outputs.append((list(prompt), ids, logprobs))
            out.append([Completion(ids, logprobs, reason)])
        return out


def calculator(calls: list[ToolCall]) -> list[ToolResult]:
    out = []
    for c in calls:
        code = c.arguments.get("code", "")
        if code.startswith("print(") and code.endswith(")"):
            try:
                out.append(ToolResult(True, f"{eval(code[6:-1], {'__builtins__': {}})}\n", None, 0.01))
                continue
            except Exception as e:
                out.append(ToolResult(False, "", f"{type(e).__name__}: {e}", 0.01))
                continue
        out.append(ToolResult(False, "", "only print(<expression>) here", 0.01))
    return out


def check_exact(sample, engine, allow_cut_last=False):
    """Every model turn is exactly what one engine call returned (ids and logprobs) for exactly the
    token history before it; everything between turns is observation (mask 0, logprob 0)."""
    full = sample.prompt_ids + sample.response_ids
    assert len(sample.response_ids) == len(sample.loss_mask) == len(sample.rollout_logprobs)
    pos = 0
    for k, (start, end) in enumerate(sample.turn_spans):
        history = full[: len(sample.prompt_ids) + start]
        cut = allow_cut_last and k == len(sample.turn_spans) - 1
        matches = [
            (ids[: end - start], lps[: end - start]) if cut else (ids, lps)
            for p, ids, lps in engine.outputs
            if p == history
        ]
        assert (sample.response_ids[start:end], sample.rollout_logprobs[start:end]) in matches, f"turn {k}"
        assert sample.loss_mask[pos:start] == [0] * (start - pos) and sample.loss_mask[start:end] == [1] * (end - start)
        assert all(lp == 0.0 for lp in sample.rollout_logprobs[pos:start])
        pos = end
    assert sum(sample.loss_mask) == sum(end - start for start, end in sample.turn_spans)


def rendered(tokenizer, messages, tools=None):
    return tokenizer.apply_chat_template(messages, tokenize=False, tools=tools)


def decoded(tokenizer, sample):
    return tokenizer.decode(sample.prompt_ids + sample.response_ids)


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
    # The result continues the model's own message (the seeds' protocol), then the model goes on.
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


class Flaky:
    """Raises on its second step when built with explode=True (per row)."""

    def reset(self, explode=False, **_):
        self.explode, self.t = explode, 0
        return "start"

    def step(self, action):
        self.t += 1
        if self.explode and self.t == 2:
            raise RuntimeError("the game server crashed")
        return f"obs {self.t}", 0.25, self.t >= 3, {"t": self.t}

    def get_state_description(self):
        return f"t={self.t}"

    def get_prompt_prefix(self):
        return "Play."


def env_loop(engine, tok, runner, **limits):
    return AgentLoop(
        engine,
        tok,
        AgentLimits(**{"max_tokens_per_turn": 16, **limits}),
        env_reset=runner.reset,
        env_step=runner.step,
        env_close=runner.close,
    )


def test_env_exception_is_data_and_the_rollout_goes_on(tok):
    engine = ScriptedEngine(tok, lambda turn, text: f"act{turn}" + EOS)
    runner = EnvRunner(Flaky)
    samples = env_loop(engine, tok, runner).run([{"explode": True}, {"explode": False}], SamplingParams(), n=1)
    bad, good = samples
    assert bad.finish_reason == "env_error" and "the game server crashed" in bad.meta["env"]["error"]
    assert bad.meta["env"]["rewards"] == [0.25] and episode_return(bad) == 0.25
    assert (
        good.finish_reason == "stop" and good.meta["env"]["rewards"] == [0.25] * 3 and good.meta["env"]["error"] is None
    )
    assert runner.live == {}  # every episode finished; its instance waits for the reward function
    handed = [runner.finished(s.meta["episode_id"]) for s in samples]
    assert [env is not None for env, _ in handed] == [True, True] and [reuse for _, reuse in handed] == [False, True]
    for env, reuse in handed:
        runner.recycle(env, reuse)
    assert len(runner.free) == 1  # the good instance serves again; the broken one never does
    for s in samples:
        check_exact(s, engine)


def test_env_turns_render_as_user_turns_with_per_turn_rewards(tok):
    engine = ScriptedEngine(tok, lambda turn, text: f"act{turn}" + EOS)
    [s] = env_loop(engine, tok, EnvRunner(Flaky)).run([{}], SamplingParams(), n=1)
    conversation = [{"role": "system", "content": "Play."}, {"role": "user", "content": "start"}]
    for k in range(3):
        conversation.append({"role": "assistant", "content": f"act{k}"})
        if k < 2:
            conversation.append({"role": "user", "content": f"obs {k + 1}"})
    assert decoded(tok, s) + "\n" == rendered(tok, conversation)
    # each step's reward sits on the last token (the EOS) of the turn that earned it
    assert s.token_rewards == {end - 1: 0.25 for _, end in s.turn_spans}
    assert all(s.response_ids[end - 1] == tok.eos_token_id for _, end in s.turn_spans)
    assert s.meta["env"]["infos"] == [{"t": 1}, {"t": 2}, {"t": 3}]


def test_env_reset_failure_is_data(tok):
    class Broken(Flaky):
        def reset(self, **row):
            raise ValueError("no such level")

    engine = ScriptedEngine(tok, lambda turn, text: "x" + EOS)
    [s] = env_loop(engine, tok, EnvRunner(Broken)).run([{}], SamplingParams(), n=1)
    assert s.finish_reason == "env_error" and "no such level" in s.meta["env"]["error"]
    assert s.response_ids == [] and s.prompt_ids and engine.outputs == []


# ----------------------------------------------------------------------------------- limits


def test_limits_and_finish_reasons(tok):
    forever = lambda turn, text: "<tool>print(1)</tool>"  # 21 tokens, a call every turn
    cases = [  # limits -> finish reason, model turns, calls run
        (AgentLimits(max_turns=3, max_tool_turns=9, max_tokens_per_turn=30, max_total_tokens=1000), "max_turns", 3, 2),
        (AgentLimits(max_turns=9, max_tool_turns=2, max_tokens_per_turn=30, max_total_tokens=1000), "max_turns", 3, 2),
        (AgentLimits(max_turns=9, max_tool_turns=9, max_tokens_per_turn=10, max_total_tokens=1000), "length", 1, 0),
        (AgentLimits(max_turns=9, max_tool_turns=9, max_tokens_per_turn=30, max_total_tokens=60), "budget", 2, 1),
    ]
    for limits, reason, turns, ran in cases:
        engine = ScriptedEngine(tok, forever)
        loop = AgentLoop(engine, tok, limits, parser=get_parser("tag"), run_tools=calculator)
        [s] = loop.run([{"prompt": "loop"}], SamplingParams(), n=1)
        assert (s.finish_reason, len(s.turn_spans), len(s.tool_calls)) == (reason, turns, ran), limits
        assert len(s.response_ids) <= limits.max_total_tokens
        check_exact(s, engine)


class Talk:
    """Never done; its observations are `size` characters long."""

    def reset(self, size, **_):
        self.size = size
        return "go"

    def step(self, action):
        return "x" * self.size, 0.0, False, {}

    def get_state_description(self):
        return ""

    def get_prompt_prefix(self):
        return ""


def test_budget_cut_keeps_an_exact_prefix(tok):
    # Two episodes in one batch: the one with long observations has less room left than the
    # engine call's max_tokens, so its turn is cut to what fits (a prefix of a sample is a sample).
    fmt = ChatFormat(tok)
    long_obs = len(fmt.observation_ids([{"role": "user", "content": "x" * 30}], tok.eos_token_id))
    engine = ScriptedEngine(tok, lambda turn, text: "abcdefghij" + EOS)  # 11 tokens a turn
    runner = EnvRunner(Talk)
    limits = AgentLimits(max_turns=5, max_tokens_per_turn=11, max_total_tokens=11 + long_obs + 4)
    loop = AgentLoop(engine, tok, limits, env_reset=runner.reset, env_step=runner.step, env_close=runner.close)
    cut, roomy = loop.run([{"size": 30}, {"size": 1}], SamplingParams(), n=1)
    assert cut.finish_reason == "budget" and len(cut.response_ids) == limits.max_total_tokens
    assert cut.turn_spans[-1][1] - cut.turn_spans[-1][0] == 4
    check_exact(cut, engine, allow_cut_last=True)
    assert roomy.finish_reason == "budget" and len(roomy.turn_spans) >= 2
    check_exact(roomy, engine, allow_cut_last=True)
    assert runner.live == {}


def test_many_episodes_one_generate_call_per_turn(tok):
    calls = []

    class Counting(ScriptedEngine):
        def generate(self, prompts, sampling):
            calls.append((len(prompts), sampling.n, sampling.seed, sampling.stop))
            return super().generate(prompts, sampling)

    # episodes end at different turns: 1, 2 or 3 tool calls then an answer
    def script(turn, text):
        k = int(text.split("k=")[1][0])
        return "<tool>print(1)</tool>" if turn < k else "done" + EOS

    engine = Counting(tok, script)
    loop = AgentLoop(
        engine, tok, AgentLimits(max_turns=5, max_tokens_per_turn=30), parser=get_parser("tag"), run_tools=calculator
    )
    samples = loop.run([{"prompt": f"k={k}"} for k in (1, 2, 3)], SamplingParams(seed=5), n=2, first_group_id=10)
    assert [c[0] for c in calls] == [6, 6, 4, 2]  # live episodes per turn, one call each
    assert all(c[1] == 1 and c[3] == ("</tool>",) for c in calls)
    assert len({c[2] for c in calls}) == 4  # a fresh, reproducible seed per turn
    assert [s.group_id for s in samples] == [10, 10, 11, 11, 12, 12]
    assert [len(s.turn_spans) for s in samples] == [2, 2, 3, 3, 4, 4]
    m = episode_metrics(samples)
    assert m["agent/tool_calls"] == 2.0 and m["agent/turns"] == 3.0 and m["agent/finish_stop"] == 1.0
    assert tool_call_counts(samples) == {"tools/calls": 12.0, "tools/errors": 0.0}
    for s in samples:
        check_exact(s, engine)


# ----------------------------------------------------------------------------------- built-in tasks


def test_builtin_trajectories_use_the_loop_layout(tok):
    """Warm-start examples are laid out as the loop lays out episodes (same ids, same mask)."""
    fmt = ChatFormat(tok)
    traj = MathToolEnv.warm_start_episodes(40, 0)
    tool_traj = next(t for t in traj if len(t.turns) == 2)
    prompt, response, mask = encode_scripted(fmt, tool_traj)
    texts = [t.text for t in tool_traj.turns]
    engine = ScriptedEngine(tok, lambda turn, text: [texts[0], texts[1] + EOS][turn])
    loop = AgentLoop(engine, tok, AgentLimits(max_tokens_per_turn=40), parser=get_parser("tag"), run_tools=calculator)
    [s] = loop.run([{"prompt": tool_traj.prompt[0]["content"]}], SamplingParams(), n=1)
    assert (s.prompt_ids, s.response_ids, s.loss_mask) == (prompt, response, mask)

    game = TextGameEnv.warm_start_episodes(20, 0)
    assert {len(t.turns) for t in game} >= {1, 2, 3}
    env = TextGameEnv()
    row = TextGameEnv.make_rows(1, 3)[0]
    env.reset(**row)
    weapon = next(i for i in row["items"] if i in WEAPONS)
    assert env.step(f"take {weapon}")[1:3] == (0.5, False)
    assert env.step(f"attack {row['monster']}")[1:3] == (1.0, True)


def test_math_tool_env_rewards_exact_answers():
    env = MathToolEnv()
    row = MathToolEnv.make_rows(1, 0)[0]
    assert env.reset(**row) == row["prompt"] and "<tool>" in row["prompt"]
    assert env.step(row["ground_truth"])[1:3] == (1.0, True)
    env.reset(**row)
    assert env.step(row["ground_truth"] + "0")[1] == 0.0


# ----------------------------------------------------------------------------------- the real engine


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
