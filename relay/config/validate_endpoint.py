"""endpoint.* and task.agent (relay/config/endpoint.py): values, the agent program's signature, and
the settings task.agent cannot go with."""

from __future__ import annotations

import importlib.util
import inspect

from relay.config.dotted import check_dotted, resolve_dotted
from relay.config.schema import TOOL_PARSERS, Config


def validate_endpoint(cfg: Config) -> list[str]:
    """endpoint.* and task.agent, with the settings they cannot go with."""
    e, t, p = cfg.endpoint, cfg.task, []
    if e.parser not in TOOL_PARSERS:
        p.append(f"endpoint.parser: unknown tool parser {e.parser!r}; choose one of {sorted(TOOL_PARSERS)}")
    if not 0 <= e.port <= 65535:
        p.append(f"endpoint.port: must be in [0, 65535] (0: any free port), got {e.port}")
    if not e.batch_wait_ms >= 0:
        p.append(f"endpoint.batch_wait_ms: must be >= 0, got {e.batch_wait_ms}")
    if e.token is not None and (not e.token or not e.token.isprintable() or any(c.isspace() for c in e.token)):
        p.append("endpoint.token: must be non-empty printable text without spaces (it is sent as a bearer token)")
    for key in ("idle_timeout_s", "body_timeout_s"):
        if not getattr(e, key) > 0:
            p.append(f"endpoint.{key}: must be > 0 seconds, got {getattr(e, key)}")
    for key in ("max_connections", "max_connections_per_peer"):
        if getattr(e, key) < 1:
            p.append(f"endpoint.{key}: must be >= 1, got {getattr(e, key)}")
    if t.agent is None:
        return p
    if importlib.util.find_spec("openai") is None:
        p.append("task.agent: needs the openai package (pip install openai)")
    err = check_dotted(t.agent)
    if err is None:
        err = check_agent_fn(resolve_dotted(t.agent))
    if err is not None:
        p.append(f"task.agent: {err}")
    for key, clash in (
        ("task.env", t.env is not None),
        ("tools.enabled", cfg.tools.enabled),
        ("rollout.partial", cfg.rollout.partial),
    ):
        if clash:
            p.append(f"{key}: not with task.agent (the agent program runs its own tools and turns)")
    if t.prompt_format == "raw":
        p.append("task.prompt_format: raw has no chat template; task.agent's chat requests need chat or auto")
    return p


def check_agent_fn(fn) -> str | None:
    """Why `fn` cannot be an agent program `run(client, row)`, or None."""
    if not callable(fn):
        return f"{fn!r} is not callable"
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    positional = [p for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = sum(p.default is p.empty for p in positional)
    varargs = any(p.kind is p.VAR_POSITIONAL for p in sig.parameters.values())
    if required > 2 or (len(positional) < 2 and not varargs):
        names = ", ".join(p.name for p in positional)
        return f"{getattr(fn, '__name__', fn)}({names}): an agent program takes (client, row)"
    return None
