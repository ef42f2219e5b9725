"""Built-in task for pretrained chat models: small arithmetic asked in words, answered in a chat turn.

    user:      What is 14 * 9? Answer with the number only.
    assistant: 126

The problem space is every `a op b` with both operands in [task.operand_min, task.operand_max] and
op in task.ops. The held-out problems are drawn from it first, with their own seed, and training
rows never contain one of them: held-out accuracy measures problems the model was never trained on.

The reward reads the last integer of the answer, so "14 * 9 = 126" counts as right. An instruct
model that explains instead of answering runs out of tokens (rollout.max_new_tokens) before the
number and scores 0, so training teaches it both to compute and to answer briefly.
"""

from __future__ import annotations

import operator
import random
import re
from typing import Any

OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul}
QUESTION = "What is {a} {op} {b}? Answer with the number only."
_INTEGER = re.compile(r"-?\d+")


def problem_space(ops: str, lo: int, hi: int) -> list[tuple[int, str, int]]:
    return [(a, op, b) for op in ops for a in range(lo, hi + 1) for b in range(lo, hi + 1)]


def split_problems(ops: str, lo: int, hi: int, num_eval: int, seed: int):
    """(training problems, held-out problems): disjoint, each in a fixed order for the seed."""
    space = problem_space(ops, lo, hi)
    random.Random(seed).shuffle(space)
    return space[num_eval:], space[:num_eval]


def as_row(problem: tuple[int, str, int]) -> dict[str, Any]:
    a, op, b = problem
    return {"prompt": QUESTION.format(a=a, op=op, b=b), "ground_truth": str(OPS[op](a, b))}


def make_rows(num_train: int, num_eval: int, seed: int, ops: str, lo: int, hi: int):
    """num_train training rows drawn with replacement from the training problems, and every
    held-out problem once (num_eval of them)."""
    train, held_out = split_problems(ops, lo, hi, num_eval, seed)
    rng = random.Random(seed + 1)
    return [as_row(rng.choice(train)) for _ in range(num_train)], [as_row(p) for p in held_out]


def final_integer(text: str) -> str | None:
    found = _INTEGER.findall(text)
    return found[-1] if found else None


def chat_arithmetic_reward(sample, env=None) -> float:
    """1 when the last integer of the final turn is the answer, 0 otherwise."""
    return 1.0 if final_integer(sample.final_text) == str(sample.ground_truth) else 0.0
