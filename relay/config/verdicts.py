"""The judge's verdict parsers (reward_model.judge.parser): each built-in parser is declared with
its name, so the registry is the one list of names.

    VERDICT_PARSERS["number"]("Score: 7")      # 7.0
    @verdict_parser("yes_no")                  # a new parser: its function, named where it is defined

A parser reads the judge's answer and returns a number, or raises ValueError for an answer it
cannot read (a counted reward error, rm/errors, never a crash). Anything not named here is a
dotted path to the user's own function of the text. The registry lives in the config package,
torch-free, for the engine registry's reason: the config checks read it in the driver, and
relay.rewards imports relay.config, never the other way round. relay.rewards.reward_model turns a
name or a function into a finite float (parse_verdict).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

VERDICT_PARSERS: dict[str, Callable[[str], float]] = {}


def verdict_parser(name: str) -> Callable[[Callable[[str], float]], Callable[[str], float]]:
    """Register the decorated function as the built-in parser `name`."""

    def register(fn: Callable[[str], float]) -> Callable[[str], float]:
        if name in VERDICT_PARSERS:
            raise ValueError(
                f"verdict parser {name!r} is declared twice ({VERDICT_PARSERS[name].__name__}, {fn.__name__})"
            )
        VERDICT_PARSERS[name] = fn
        return fn

    return register


_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


@verdict_parser("number")
def parse_number(text: str) -> float:
    """The last number in the judge's answer ("Score: 7/10" reads 10, so templates should ask for one number)."""
    found = _NUMBER.findall(text)
    if not found:
        raise ValueError(f"no number in the verdict {shown(text)}")
    value = float(found[-1])
    if not math.isfinite(value):
        raise ValueError(f"the verdict {shown(text)} is not a finite number")
    return value


@verdict_parser("yes_no")
def parse_yes_no(text: str) -> float:
    """1.0 for a verdict that starts with yes, 0.0 for one that starts with no (any case, after spaces)."""
    word = text.strip().lower()
    if word.startswith("yes"):
        return 1.0
    if word.startswith("no"):
        return 0.0
    raise ValueError(f"the verdict {shown(text)} starts with neither yes nor no")


def shown(text: str) -> str:
    """A verdict as an error message quotes it: its first 80 characters."""
    return repr(text if len(text) <= 80 else text[:80] + "...")
