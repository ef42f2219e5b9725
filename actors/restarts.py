"""Actors that Ray restarts: whether this process is a replacement, and waiting for one.

Ray's failure semantics shape these: while an actor restarts, a call to it may fail as
unavailable or never be answered; and a call sent right after `ray.kill(no_restart=False)` may
still be answered by the instance being killed. Process ids tell the instances apart.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable

import ray
from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError

PING_S = 5.0  # one ping's wait while a killed actor is being restarted


def process_id(actor) -> int:
    """Run in the actor (`actor.__ray_call__.remote(process_id)`): its process id."""
    return os.getpid()


def is_restarted_actor() -> bool:
    """Called in an actor's constructor: whether Ray is rebuilding it after a loss (False outside Ray)."""
    if not ray.is_initialized() or ray.get_runtime_context().get_actor_id() is None:
        return False
    with warnings.catch_warnings():  # Ray 2.60's property reads its own deprecated actor_id
        warnings.simplefilter("ignore")
        return bool(ray.get_runtime_context().was_current_actor_reconstructed)


def wait_restarted(actor, timeout_s: float, unanswered: Callable[[], None] | None = None) -> bool:
    """True once `actor` answers again (restarted); False when it is gone for good (ActorDiedError)
    or stays silent for `timeout_s`. While Ray restarts it, a ping may fail as unavailable, or
    never be answered (sent to the instance being killed): ping again, each ping briefly, calling
    `unanswered()` after each ping that got no answer (the caller says what it waits for)."""
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        try:
            ray.get(actor.__ray_ready__.remote(), timeout=min(left, PING_S))
            return True
        except (ActorUnavailableError, GetTimeoutError):
            if unanswered is not None:
                unanswered()
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
        except RayActorError:
            return False
    return False


def process_ids(actors: list) -> list[int | None]:
    """Each actor's process id; None for one that does not answer within PING_S (busy or hung: that
    instance cannot answer a call after its kill either)."""
    refs = [a.__ray_call__.remote(process_id) for a in actors]
    if refs:  # ray.wait refuses to wait for none
        ray.wait(refs, num_returns=len(refs), timeout=PING_S)
    ids = []
    for ref in refs:
        try:
            ids.append(ray.get(ref, timeout=0))
        except (RayActorError, GetTimeoutError):
            ids.append(None)
    return ids


def restart(actors: list, timeout_s: float) -> list[bool]:
    """Kill each of `actors` to be restarted, then wait for each replacement (a process other than
    the killed one); whether each answered within `timeout_s`."""
    old = process_ids(actors)
    for actor in actors:
        ray.kill(actor, no_restart=False)
    return [replaced(actor, pid, timeout_s) for actor, pid in zip(actors, old)]


def replaced(actor, old_pid: int | None, timeout_s: float) -> bool:
    """Once the replacement of `actor`, killed to be restarted, answers from a process other than
    `old_pid`; False when none does within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0 and wait_restarted(actor, left):
        try:
            if ray.get(actor.__ray_call__.remote(process_id), timeout=min(PING_S, left)) != old_pid:
                return True
        except (RayActorError, GetTimeoutError):
            pass
        time.sleep(0.1)
    return False
