"""Built-in task for pretrained chat models: arithmetic out of reach of mental math, with a tool.

    system:    the `python` tool's JSON schema, and how to call it
    user:      What is 347 * 829?
    assistant: <tool_call>
               {"name": "python", "arguments": {"code": "print(347 * 829)"}}
               </tool_call>                                  (generation stops at </tool_call>)
    tool:      287663                                        (the sandbox's output; loss mask 0)
    assistant: 287663                                        (reward 1 if the last integer is exact)

Problems are three-digit products and two-step expressions of two-digit numbers; a 135M model
gets few of them right in its head but can copy them into code. The held-out problems are drawn
first, with the run's seed, and training rows never contain one of them. `demonstrations` writes
tool-call conversations of training problems for the supervised stage (relay/config/sft.py);
`task.demonstrated_shapes` writes them for some shapes only, so the others are left to reward.
"""

from __future__ import annotations

import json
import random
from typing import Any

# The built-in python tool's parameters, with a short description: every token of the system prompt
# is paid again in every rollout, evaluation and update.
PYTHON_SCHEMA = {
    "name": "python",
    "description": "Run Python code and return what it prints.",
    "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
}
# Hermes-style tool use in the system prompt, for chat templates that do not render `tools=`.
SYSTEM = (
    f"You can call this tool:\n<tools>\n{json.dumps(PYTHON_SCHEMA)}\n</tools>\n"
    'Call it as <tool_call>\n{"name": "python", "arguments": {"code": "print(2 * 3)"}}\n</tool_call>\n'
    "Its output comes back in a tool message. Then answer with the number only."
)
# name: (expression template, operand range): three-digit products, and two steps on two-digit
# numbers. The names are relay.config.tool_tasks.CHAT_TOOL_SHAPES (task.demonstrated_shapes).
SHAPES = {
    "product": ("{a} * {b}", (100, 999)),
    "product_plus": ("{a} * {b} + {c}", (10, 99)),
    "sum_times": ("({a} + {b}) * {c}", (10, 99)),
    "product_minus": ("{a} * {b} - {c}", (10, 99)),
}


def expression(rng: random.Random) -> tuple[str, str]:
    """(a random problem's expression, its shape's name)."""
    name = rng.choice(tuple(SHAPES))
    shape, (lo, hi) = SHAPES[name]
    return shape.format(a=rng.randint(lo, hi), b=rng.randint(lo, hi), c=rng.randint(lo, hi)), name


def as_row(expr: str, shape: str | None = None) -> dict[str, Any]:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"What is {expr}?"}]
    row = {"messages": messages, "ground_truth": str(eval(expr, {"__builtins__": {}}))}  # our own digits and + - * ( )
    return row | ({"shape": shape} if shape else {})


def make_rows(num_train: int, num_eval: int, seed: int) -> tuple[list[dict], list[dict]]:
    """(training rows, held-out rows): num_eval distinct held-out problems, and training problems
    drawn with the same seed, skipping every held-out one. Each row names its shape."""
    rng = random.Random(seed)
    held_out: dict[str, str] = {}
    while len(held_out) < num_eval:
        expr, shape = expression(rng)
        held_out[expr] = shape
    train = []
    while len(train) < num_train:
        if (drawn := expression(rng))[0] not in held_out:
            train.append(drawn)
    return [as_row(*p) for p in train], [as_row(*p) for p in held_out.items()]


def demonstrations(rows: list[dict]) -> list[dict]:
    """Tool-call conversations solving `rows`: call the tool with the expression, read its output,
    answer with it; the chat rows the supervised stage trains on."""
    out = []
    for row in rows:
        expr = row["messages"][-1]["content"].removeprefix("What is ").removesuffix("?")
        call = {"name": "python", "arguments": {"code": f"print({expr})"}}
        turns = [
            {"role": "assistant", "content": f"<tool_call>\n{json.dumps(call)}\n</tool_call>"},
            {"role": "tool", "content": row["ground_truth"]},  # its output as the model reads it
            {"role": "assistant", "content": row["ground_truth"]},
        ]
        out.append({"messages": row["messages"] + turns})
    return out
