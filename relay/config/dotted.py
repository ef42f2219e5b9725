"""Dotted paths to user code (`pkg.module:attr` or `pkg.module.attr`): task.env, task.reward_fn,
tools.functions. Modules are found on sys.path and in the current directory (where Ray's local
workers also look). Each path is imported once per process: validation, the driver and every actor
in the same process share the one object."""

from __future__ import annotations

import functools
import importlib
import os
import sys


@functools.cache
def resolve_dotted(dotted: str):
    """The object `dotted` names; raises (ImportError, AttributeError, ...) when it cannot be loaded.
    A failure is not cached: a path that cannot be loaded is tried again on the next call."""
    if os.getcwd() not in sys.path:  # user packages next to the config, as Ray's workers also find them
        sys.path.append(os.getcwd())
    module, sep, attr = dotted.partition(":")
    if not sep:
        module, _, attr = dotted.rpartition(".")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def check_dotted(dotted: str) -> str | None:
    """None if `dotted` loads, else the reason."""
    try:
        resolve_dotted(dotted)
    except Exception as e:  # report, don't crash: validation lists every problem
        return f"cannot load {dotted!r}: {e}"
    return None
