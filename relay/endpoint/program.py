"""Running the user's agent program, `run(client, row) -> float | dict`, once per episode (task.agent).

    outcomes = run_agent_programs(run, [(episode_id, row, base_url), ...], api_key)

Each episode gets a client of its own, pointed at its episode's URL on the rollout worker's
endpoint (relay/endpoint/server.py), so every call it makes is recorded for that episode: an
`openai.OpenAI` client for a plain function, run on a thread of its own, or an
`openai.AsyncOpenAI` client for an `async def`, all on one event loop. Every episode runs at once
(rollout.n x the worker's prompts). The program returns the reward, or a dict with "reward" and
anything else (its info); a program that raises, or returns no finite number, is an error with
the line where it happened, recorded on the episode's samples (a reward error: never trained on).
The clients do not retry (max_retries=0): a retried call would reach the endpoint twice.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import numbers
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from relay.endpoint.samples import AgentOutcome

CLIENT_TIMEOUT_S = 600.0  # one call's seconds: a batch may wait behind other episodes' calls


def run_agent_programs(
    program: Callable, episodes: list[tuple[str, dict, str]], api_key: str, timeout_s: float = CLIENT_TIMEOUT_S
) -> list[AgentOutcome]:
    """One outcome per (episode id, row, base URL), in order. The episodes' clients share one HTTP
    connection pool: a client of its own costs about 0.13 s to make (its TLS context), 0.6 ms so."""
    if not episodes:
        return []
    import openai

    # openai's own HTTP client class (whichever HTTP library this openai version is built on), with
    # its default pool (openai.DEFAULT_CONNECTION_LIMITS: 1000 connections)
    pool = dict(timeout=timeout_s)
    if inspect.iscoroutinefunction(program):
        return asyncio.run(_run_async(program, episodes, api_key, openai.DefaultAsyncHttpxClient(**pool)))
    with openai.DefaultHttpxClient(**pool) as http:
        with ThreadPoolExecutor(len(episodes), thread_name_prefix="relay-agent") as pool:
            return list(pool.map(lambda e: _run_sync(program, e[1], e[2], api_key, http), episodes))


def _run_sync(program: Callable, row: dict, url: str, api_key: str, http) -> AgentOutcome:
    import openai

    client = openai.OpenAI(base_url=url, api_key=api_key, max_retries=0, http_client=http)
    try:
        return as_outcome(program, lambda: program(client, row))
    finally:
        _mark_done(lambda: http.post(f"{url}/done", headers=_auth(api_key)))


async def _run_async(program: Callable, episodes: list[tuple[str, dict, str]], api_key: str, http):
    import openai

    async def one(row: dict, url: str) -> AgentOutcome:
        client = openai.AsyncOpenAI(base_url=url, api_key=api_key, max_retries=0, http_client=http)
        try:
            try:
                value = await program(client, row)
            except Exception as e:
                return AgentOutcome(error=_raised(program, e))
            return as_outcome(program, lambda: value)
        finally:
            try:
                await http.post(f"{url}/done", headers=_auth(api_key))
            except Exception:
                pass  # the batcher then waits its window for this episode: slower, never wrong

    async with http:
        return list(await asyncio.gather(*(one(row, url) for _, row, url in episodes)))


def as_outcome(program: Callable, call: Callable[[], Any]) -> AgentOutcome:
    """The program's return value as an outcome; what it raised, or a return that is no reward, as an error."""
    name = getattr(program, "__qualname__", repr(program))
    try:
        value = call()
    except Exception as e:
        return AgentOutcome(error=_raised(program, e))
    info: dict[str, Any] = {}
    if isinstance(value, dict):
        if "reward" not in value:
            return AgentOutcome(
                error=f"agent program {name} returned a dict without a 'reward' key: {sorted(value)[:8]}"
            )
        info = {k: v for k, v in value.items() if k != "reward"}
        value = value["reward"]
    if not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        return AgentOutcome(info=info, error=f"agent program {name} returned {value!r}, not a finite number")
    return AgentOutcome(reward=float(value), info=info)


def _raised(program: Callable, e: Exception) -> str:
    name = getattr(program, "__qualname__", repr(program))
    frames = traceback.format_exception(type(e), e, e.__traceback__, limit=-2)
    return f"agent program {name} raised {type(e).__name__}: {e}\n" + "".join(frames[1:-1]).rstrip()


def _auth(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"}


def _mark_done(post: Callable[[], Any]) -> None:
    try:
        post()
    except Exception:
        pass  # the batcher then waits its window for this episode: slower, never wrong
