"""What the agent-loop tests share (tests/unit/test_agent_*.py and others): a scripted engine that
records every call, a tool, a Qwen2.5-style chat template, the token-exactness check, and an
environment that can crash."""

from __future__ import annotations

from relay.agent.loop import AgentLimits, AgentLoop
from relay.engines.base import Completion
from relay.tools.calls import ToolCall
from relay.tools.registry import ToolResult

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
