"""Built-in task `tool_chain`: two tool calls in sequence, the second using the first's output.

    system:    the lookup and python tools' schemas, and how to call them
    user:      Let x be the number stored under key QX4. What is x * 23?
    assistant: <tool_call>{"name": "lookup", "arguments": {"key": "QX4"}}</tool_call>
    tool:      517
    assistant: <tool_call>{"name": "python", "arguments": {"code": "print(517 * 23)"}}</tool_call>
    tool:      11891
    assistant: 11891                                    (reward 1 if the last integer is exact)

x is unknowable without `lookup` (relay/envs/keyed_values.py), and a three-digit number times a
two-digit one is out of a small model's mental reach, so an episode scores only by chaining the
calls. The demonstrations (sft.data: task) are single-call episodes only, the halves of training
problems: "What is the number stored under key QX4?" by lookup, and "What is 517 * 23?" by
python. Chaining the two has to come from reward. Held-out problems use keys no training row
uses, so neither a question nor a stored number is ever trained on.
"""

from __future__ import annotations

import json
import random
from typing import Any

from relay.envs.chat_tool import PYTHON_SCHEMA
from relay.envs.keyed_values import LOOKUP_SCHEMA, one_call_episode, random_key, tool_call, value

SYSTEM = (
    f"You can call these tools:\n<tools>\n{json.dumps(LOOKUP_SCHEMA)}\n{json.dumps(PYTHON_SCHEMA)}\n</tools>\n"
    f"Call one as {tool_call('lookup', {'key': 'AB1'})}\n"
    "Its output comes back in a tool message, and you may call a tool again. "
    "Then answer with the number only."
)
QUESTION = "Let x be the number stored under key {key}. What is x * {b}?"
# task.worked_example: one whole episode in the system prompt, for a run with no demonstrations
EXAMPLE_KEY, EXAMPLE_B = "AB1", 12
WORKED_EXAMPLE = (
    f"\nExample:\nuser: {QUESTION.format(key=EXAMPLE_KEY, b=EXAMPLE_B)}\n"
    f"assistant: {tool_call('lookup', {'key': EXAMPLE_KEY})}\ntool: {value(EXAMPLE_KEY)}\n"
    f"assistant: {tool_call('python', {'code': f'print({value(EXAMPLE_KEY)} * {EXAMPLE_B})'})}\n"
    f"tool: {value(EXAMPLE_KEY) * EXAMPLE_B}\nassistant: {value(EXAMPLE_KEY) * EXAMPLE_B}"
)


def as_row(key: str, b: int, worked_example: bool = False) -> dict[str, Any]:
    system = SYSTEM + (WORKED_EXAMPLE if worked_example else "")
    messages = [{"role": "system", "content": system}, {"role": "user", "content": QUESTION.format(key=key, b=b)}]
    return {"messages": messages, "ground_truth": str(value(key) * b), "key": key, "b": b}


def make_rows(
    num_train: int, num_eval: int, seed: int, worked_example: bool = False, nudge: float = 0.0
) -> tuple[list[dict], list[dict]]:
    """(training rows, held-out rows): num_eval distinct held-out problems drawn first with the
    run's seed, then training problems whose keys are none of the held-out ones. worked_example:
    the system prompt ends with one whole two-call episode. nudge: in that share of each training
    group's episodes a successful lookup replies "QX4 holds 517. Now compute 517 * 23 with python.",
    which makes the untaught second call likely enough for a group to hold a success. The episode
    is trained on with the bare reply, "517", the one held-out episodes read."""
    rng = random.Random(seed)
    shown = {EXAMPLE_KEY} if worked_example else set()  # the example's key is asked by no row
    held_out: dict[tuple[str, int], None] = {}
    while len(held_out) < num_eval:
        key, b = random_key(rng), rng.randint(11, 99)
        if key not in shown:
            held_out[(key, b)] = None
    held_out_keys = {key for key, _ in held_out} | shown
    train = []
    while len(train) < num_train:
        key, b = random_key(rng), rng.randint(11, 99)
        if key not in held_out_keys:
            train.append((key, b))
    rows = [as_row(*p, worked_example) for p in train]
    if nudge:
        for row in rows:
            text = f"{row['key']} holds {{output}}. Now compute {{output}} * {row['b']} with python."
            row["nudge"] = {"tool": "lookup", "share": nudge, "text": text}
    return rows, [as_row(*p, worked_example) for p in held_out]


def demonstrations(rows: list[dict]) -> list[dict]:
    """Single-call conversations from `rows`: each row's lookup half, then its compute half."""
    out = []
    for row in rows:
        system, x = row["messages"][0]["content"], str(value(row["key"]))  # the row's own system prompt
        lookup_call = tool_call("lookup", {"key": row["key"]})
        out.append(one_call_episode(system, f"What is the number stored under key {row['key']}?", lookup_call, x))
        expr = f"{x} * {row['b']}"
        out.append(
            one_call_episode(
                system, f"What is {expr}?", tool_call("python", {"code": f"print({expr})"}), row["ground_truth"]
            )
        )
    return out
