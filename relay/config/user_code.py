"""The user's code a config names: its environment class and reward function, checked by their
signatures before any actor starts, so a mistake is one line at start-up instead of a crash in an actor."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

# A reward function with a parameter of this name combines the reward model's score itself
# (reward_model.*): it is passed by keyword, None where no reward model scored the sample.
RM_SCORE_PARAM = "rm_score"


def check_env_class(cls: Any) -> str | None:
    """Why `cls` cannot be an environment, or None. Checked before any actor starts."""
    if not callable(cls):
        return f"{cls!r} is not a class"
    missing = [m for m in ("reset", "step") if not callable(getattr(cls, m, None))]
    if missing:
        return f"{getattr(cls, '__name__', cls)} has no {' or '.join(m + '()' for m in missing)} method"
    try:
        sig = inspect.signature(cls)
    except (TypeError, ValueError):
        return None
    required = [
        p.name
        for p in sig.parameters.values()
        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    if len(required) > 1 or (required and required[0] == "seed"):
        return (
            f"{cls.__name__}({', '.join(required)}): the constructor may require at most one argument (the env config)"
        )
    return None


def positional_params(fn: Callable) -> tuple[list[str], int, bool]:
    """Positional parameter names, how many are required, and whether *args is there."""
    sig = inspect.signature(fn)
    params = [
        p
        for p in sig.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != RM_SCORE_PARAM
    ]
    required = sum(p.default is p.empty for p in params)
    return [p.name for p in params], required, any(p.kind is p.VAR_POSITIONAL for p in sig.parameters.values())


def check_reward_fn(fn: Any) -> str | None:
    """Why `fn` cannot be a reward function, or None."""
    if not callable(fn):
        return f"{fn!r} is not callable"
    try:
        names, required, varargs = positional_params(fn)
    except (TypeError, ValueError):
        return None  # a builtin or C function: it will be called with (trajectory, environment)
    if required > 2:
        return f"{getattr(fn, '__name__', fn)}({', '.join(names)}) needs {required} arguments; a reward function takes (trajectory) or (trajectory, environment)"
    if not names and not varargs:
        return f"{getattr(fn, '__name__', fn)}() takes no arguments; a reward function takes (trajectory) or (trajectory, environment)"
    return None


def wants_rm_score(fn: Callable) -> bool:
    """Whether fn has an `rm_score` parameter (it gets the reward model's score by keyword)."""
    try:
        return RM_SCORE_PARAM in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
