"""Dotted paths to user code (`pkg.module:attr` or `pkg.module.attr`): task.env, task.reward_fn,
tools.functions. From Python (relay.ConfigStore, RayPPOTrainer) task.env and task.reward_fn may hold
the class or function itself; it passes through as it is and reaches the actors pickled by Ray
(by value when it was defined in a script or notebook). Modules are found on sys.path and in the current directory (where Ray's local
workers also look). Each path is imported once per process: validation, the driver and every actor
in the same process share the one object."""

from __future__ import annotations

import functools
import importlib
import os
import sys


def resolve_dotted(dotted):
    """The object `dotted` names; raises (ImportError, AttributeError, ...) when it cannot be loaded.
    A failure is not cached: a path that cannot be loaded is tried again on the next call. An object
    that is not a string is the user's code itself, returned unchanged."""
    return _import_dotted(dotted) if isinstance(dotted, str) else dotted


resolve_dotted.cache_info = lambda: _import_dotted.cache_info()  # how often a path came from the cache


def dotted_name(obj) -> str:
    """`module:qualname` of a class or function (how a resolved config names user code given as an object)."""
    if isinstance(obj, str):
        return obj
    return f"{getattr(obj, '__module__', '?')}:{getattr(obj, '__qualname__', type(obj).__qualname__)}"


@functools.cache
def _import_dotted(dotted: str):
    if os.getcwd() not in sys.path:  # user packages next to the config, as Ray's workers also find them
        sys.path.append(os.getcwd())
    module, sep, attr = dotted.partition(":")
    if not sep:
        module, _, attr = dotted.rpartition(".")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def check_dotted(dotted) -> str | None:
    """None if `dotted` loads, else the reason."""
    if not isinstance(dotted, str):
        return None
    try:
        resolve_dotted(dotted)
    except Exception as e:  # report, don't crash: validation lists every problem
        return f"cannot load {dotted!r}: {e}"
    return None
