"""Chat conversations as supervised episodes: the rows the supervised stage (sft.*) trains on.

A row is `{"messages": [...]}` in the OpenAI layout. Everything before the first assistant
message is the prompt; each assistant message is a model turn, and the messages after it up to
the next assistant message (tool results, user replies) are its observation. A turn that ends
with one of the tool parser's stop strings (hermes: `</tool_call>`) is laid out as the agent
loop lays out a turn generation stopped there: no end-of-turn token from the model, the
template's turn end opens the observation.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from relay.envs.chat import ChatFormat, ScriptedEpisode, ScriptedTurn, encode_scripted
from relay.tools.calls import ToolParser
from relay.types import Sample


def episode_from_messages(messages: Any, stop_strings: tuple[str, ...] = ()) -> ScriptedEpisode:
    """The supervised episode of one conversation; ValueError (one line) for a malformed one."""
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise ValueError('"messages" must be a list of {"role": ..., "content": ...} objects')
    for i, m in enumerate(messages):
        if not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise ValueError(f"message {i + 1} needs a string role and string content (tool_calls: write the call as text)")
    roles = [m["role"] for m in messages]
    if "assistant" not in roles:
        raise ValueError("no assistant message: nothing to learn from")
    first = roles.index("assistant")
    if first == 0:
        raise ValueError("the first message is the assistant's: a prompt must come before it")
    if roles[-1] != "assistant":
        raise ValueError(f"the last message is a {roles[-1]!r} message: end with the assistant's")
    turns: list[ScriptedTurn] = []
    for m in messages[first:]:
        if m["role"] == "assistant":
            turns.append(ScriptedTurn(m["content"]))
        else:  # part of the observation after the last assistant turn
            last = turns[-1]
            if last.observation is None:
                last.observation = []
                last.eos = not any(last.text.rstrip().endswith(s) for s in stop_strings if s)
            last.observation.append({"role": m["role"], "content": m["content"]})
    return ScriptedEpisode(messages[:first], turns)


def tool_call_problem(messages: list[dict], parser: ToolParser | None) -> str | None:
    """Why a conversation's tool calls would not reach a tool in a run with `parser`: an assistant
    message the parser finds a malformed call in. None when every call parses (or no parser)."""
    if parser is None:
        return None
    turns = [m["content"] for m in messages if m.get("role") == "assistant"]
    for n, text in enumerate(turns, 1):
        if errors := parser.parse(text).errors:
            return f"assistant message {n}: its tool call does not parse with tools.parser={parser.name}: {errors[0]}"
    return None


def read_demonstrations(path: str | Path, parser: ToolParser | None = None) -> list[list[dict]]:
    """The conversations of a .jsonl file, each checked (with a parser: every tool call parses);
    ValueError naming the file and line."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                if not isinstance(row, dict) or "messages" not in row:
                    raise ValueError('a row must be an object with "messages"')
                episode_from_messages(row["messages"])
                if problem := tool_call_problem(row["messages"], parser):
                    raise ValueError(problem)
            except ValueError as e:  # json.JSONDecodeError is one
                raise ValueError(f"sft.data: {path}:{n}: {e}") from None
            rows.append(row["messages"])
    if not rows:
        raise ValueError(f"sft.data: {path}: no conversations in it")
    return rows


def batches(conversations: list[list[dict]], batch_size: int, steps: int, seed: int) -> list[list[list[dict]]]:
    """`steps` batches: passes over the conversations, each in a new shuffled order."""
    out, order, rng = [], [], random.Random(seed)
    for _ in range(steps):
        batch = []
        while len(batch) < batch_size:
            if not order:
                order = list(range(len(conversations)))
                rng.shuffle(order)
            batch.append(conversations[order.pop()])
        out.append(batch)
    return out


def supervised_sample(fmt: ChatFormat, messages: list[dict], stop_strings: tuple[str, ...] = ()) -> Sample:
    """A conversation as a Sample whose loss mask covers the assistant turns' tokens."""
    prompt, response, mask = encode_scripted(fmt, episode_from_messages(messages, stop_strings))
    return Sample(prompt, response, rollout_logprobs=[0.0] * len(response), loss_mask=mask)
