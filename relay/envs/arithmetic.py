"""Built-in task: multi-digit addition. The reward is exact match of the final answer.

Hard enough that a ~1M-parameter model after a short warm start is often wrong (carries across
several digits), easy enough that GRPO visibly improves it in minutes on a CPU.
"""

from __future__ import annotations

import random
import re
from typing import Any

_ANSWER = re.compile(r"^\s*(-?\d+)\s*$")


def make_rows(n: int, seed: int, digits: int = 3) -> list[dict[str, Any]]:
    """n prompt rows {"prompt", "ground_truth"}; a fixed seed gives fixed rows."""
    rng = random.Random(seed)
    hi = 10**digits - 1
    rows = []
    for _ in range(n):
        a, b = rng.randint(0, hi), rng.randint(0, hi)
        rows.append({"prompt": f"{a}+{b}", "ground_truth": str(a + b)})
    return rows


def parse_answer(text: str) -> str | None:
    match = _ANSWER.match(text)
    return match.group(1) if match else None


def arithmetic_reward(sample, env=None) -> float:
    """1 for the exact sum as the final turn's whole text, 0 otherwise (a malformed answer is
    simply wrong). Single-turn, the final turn is the whole response."""
    answer = parse_answer(sample.final_text)
    return 1.0 if answer is not None and answer == str(sample.ground_truth) else 0.0
