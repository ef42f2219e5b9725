"""Built-in task `tool_retry`: the tool call fails for some inputs, and the episode must recover.

    system:    the lookup tool's schema, and how to call it
    user:      What is the number stored under key qx-4?
    assistant: <tool_call>{"name": "lookup", "arguments": {"key": "qx-4"}}</tool_call>
    tool:      Error: tool 'lookup' raised ValueError: no key 'qx-4': keys are two capital
               letters and a digit; did you mean 'QX4'?
    assistant: <tool_call>{"name": "lookup", "arguments": {"key": "QX4"}}</tool_call>
    tool:      517
    assistant: 517                                      (reward 1 if the last integer is exact)

Half the questions write their key the way the tool takes it, half in a sloppy spelling (lower
case, a dash or a space) that the tool refuses with an error naming the right key. The
demonstrations (sft.data: task) are successful single calls on well-written keys only, so reading
an error and calling again has to come from reward. Held-out problems use keys no training row
uses.
"""

from __future__ import annotations

import json
import random
from typing import Any

from relay.envs.keyed_values import LOOKUP_SCHEMA, one_call_episode, random_key, tool_call, value

SYSTEM = (
    f"You can call this tool:\n<tools>\n{json.dumps(LOOKUP_SCHEMA)}\n</tools>\n"
    f"Call it as {tool_call('lookup', {'key': 'AB1'})}\n"
    "Its output comes back in a tool message, and you may call it again. Then answer with the number only."
)
QUESTION = "What is the number stored under key {shown}?"
SLOPPY = (str.lower, lambda k: f"{k[:2]}-{k[2]}", lambda k: f"{k[:2].lower()} {k[2]}")


def as_row(key: str, shown: str) -> dict[str, Any]:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION.format(shown=shown)}]
    return {"messages": messages, "ground_truth": str(value(key)), "key": key, "shown": shown}


def problem(rng: random.Random) -> tuple[str, str]:
    key = random_key(rng)
    return key, (key if rng.random() < 0.5 else rng.choice(SLOPPY)(key))


def make_rows(num_train: int, num_eval: int, seed: int) -> tuple[list[dict], list[dict]]:
    """(training rows, held-out rows): num_eval held-out problems with distinct keys drawn first,
    then training problems on every other key."""
    rng = random.Random(seed)
    held_out: dict[str, str] = {}
    while len(held_out) < num_eval:
        key, shown = problem(rng)
        held_out.setdefault(key, shown)
    train = []
    while len(train) < num_train:
        key, shown = problem(rng)
        if key not in held_out:
            train.append((key, shown))
    return [as_row(*p) for p in train], [as_row(*p) for p in held_out.items()]


def demonstrations(rows: list[dict]) -> list[dict]:
    """Successful single calls: each row's question with its key written the way the tool takes it."""
    out = []
    for row in rows:
        call = tool_call("lookup", {"key": row["key"]})
        out.append(one_call_episode(SYSTEM, QUESTION.format(shown=row["key"]), call, row["ground_truth"]))
    return out
