"""A table of numbers behind a `lookup` tool: the fact a tool task's model cannot know by heart.

Keys are two capital letters and a digit ("QX4"); each holds a three-digit number fixed by the
key's hash, so every process (rollout worker, tool executor, test) reads the same table and no
model has seen it. `lookup` is a typed function tool (tools.functions:
relay.envs.keyed_values:lookup): a key written any other way ("qx4", "QX-4") is an error whose
message names the key it should have been, so an episode can recover by calling again.
"""

from __future__ import annotations

import hashlib
import json
import random
import string

from relay.tools.schema import function_schema

KEY_LETTERS = string.ascii_uppercase


def value(key: str) -> int:
    """The number stored under a canonical key: 100..999, the same on every machine."""
    return 100 + int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") % 900


def is_key(key: str) -> bool:
    return len(key) == 3 and key[0] in KEY_LETTERS and key[1] in KEY_LETTERS and key[2].isdigit()


def canonical(key: str) -> str:
    """The key a sloppy spelling means: capitals, without spaces, dashes or underscores."""
    return "".join(c for c in key.upper() if c.isalnum())


def random_key(rng: random.Random) -> str:
    return rng.choice(KEY_LETTERS) + rng.choice(KEY_LETTERS) + str(rng.randint(0, 9))


def lookup(key: str) -> int:
    """Look up the number stored under a key.

    Args:
        key: The key: two capital letters and a digit, like "AB1".
    """
    if is_key(key):
        return value(key)
    hint = f"; did you mean {canonical(key)!r}?" if is_key(canonical(key)) else ""
    raise ValueError(f"no key {key!r}: keys are two capital letters and a digit{hint}")


# The schema as the system prompt shows it (chat templates without `tools=` see it there).
LOOKUP_SCHEMA = function_schema(lookup)["function"]


def tool_call(name: str, arguments: dict) -> str:
    """An assistant turn that calls one tool, in the hermes format the tool tasks' prompts show."""
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def one_call_episode(system: str, question: str, call: str, output: str) -> dict:
    """A demonstration: the question, one tool call, the tool's output, the output as the answer."""
    return {
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": question},
            {"role": "assistant", "content": call},
            {"role": "tool", "content": output},
            {"role": "assistant", "content": output},
        ]
    }
