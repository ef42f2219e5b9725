"""Dotted paths to user code (`pkg.module:attr` or `pkg.module.attr`): task.env, task.reward_fn,
tools.functions."""
from __future__ import annotations

import importlib


def check_dotted(dotted: str) -> str | None:
    """None if `pkg.module:attr` imports, else the reason."""
    try:
        resolve_dotted(dotted)
    except Exception as e:  # report, don't crash: validation lists every problem
        return f"cannot load {dotted!r}: {e}"
    return None


def resolve_dotted(dotted: str):
    module, sep, attr = dotted.partition(":")
    if not sep:
        module, _, attr = dotted.rpartition(".")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj
