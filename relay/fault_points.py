"""Named fault points: each remote call relay makes has a name, and a fault can be placed there on
purpose, deterministically, to prove the run survives it (tests/faults/, benchmarks/chaos.py).

`hit(point)` sits at the start of the call's work in the process that does it. Nothing is armed in
a normal run, so a hit is one dict lookup. `arm` arms this process; relay_trainer/fault_arming.py
`arm_run(run, point, kind)` arms every actor of a run (and the driver) for one fault: the first
process to reach the point claims a token file, so the fault happens exactly once in the run, in
whichever actor gets there first; a replacement Ray builds after a crash starts unarmed.

Kinds:
  sigkill    the process kills itself (SIGKILL): an OOM kill, a segfault, a lost node
  hang       the process stops itself (SIGSTOP): only a deadline finds it
  ray_kill   ray.kill of the actor by itself, restart allowed: what an operator or autoscaler does
  exception  the call raises InjectedFault
  slow       the call sleeps `slow_s` first, then does its work: longer than its deadline
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

POINTS = {
    "rollout.generate": "a rollout worker's rollout call (its shard of prompts)",
    "weights.load.shared_memory": "a rollout worker's load of the learner's shared-memory weights",
    "weights.load.object_store": "a rollout worker's load of a weight payload from the object store",
    "weights.load.broadcast": "a rollout worker's receive of the broadcast weights",
    "weights.load.colocated": "the colocated worker's retag of its engine to the trained weights",
    "env.reset": "an environment pool's reset of a shard's episodes",
    "env.step": "an environment pool's step of a shard's episodes",
    "reward.function": "the task's reward function over a shard's samples (rollout worker or env pool)",
    "reward.model": "a reward model's scores of a shard",
    "tool.call": "a tool executor's batch of tool calls",
    "reference.forward": "the reference policy's logprobs",
    "critic.forward": "the critic's values",
    "learner.update": "the learner's update",
    "checkpoint.write": "the learner's state for a checkpoint",
    "producer.queue": "the driver's producer taking a step's groups (one_step_off, async)",
}
KINDS = ("sigkill", "hang", "ray_kill", "exception", "slow")
PROCESS_KINDS = ("sigkill", "hang", "ray_kill")  # need an actor's own process: never the driver's


class InjectedFault(RuntimeError):
    """The `exception` kind: a call that raises."""


@dataclass(frozen=True)
class Armed:
    kind: str
    token: str  # a file path: the process that creates it is the one where the fault happens
    slow_s: float = 0.0
    kill_self: Callable[[], None] | None = None  # ray_kill: the actor's own ray.kill (this package has no Ray)


_armed: dict[str, Armed] = {}


def hit(point: str) -> None:
    """The fault armed at `point`, if any, happens here (once in the whole run)."""
    if not _armed:
        return
    armed = _armed.get(point)
    if armed is None or not _claim(armed.token):
        return
    print(f"relay: injected fault: {armed.kind} at {point} (pid {os.getpid()})", flush=True)
    if armed.kind == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif armed.kind == "hang":
        os.kill(os.getpid(), signal.SIGSTOP)
    elif armed.kind == "ray_kill":
        armed.kill_self()
        time.sleep(3600)  # the kill is asynchronous: the call must not go on meanwhile
    elif armed.kind == "exception":
        raise InjectedFault(f"injected fault at {point}")
    elif armed.kind == "slow":
        time.sleep(armed.slow_s)


def _claim(token: str) -> bool:
    try:
        os.close(os.open(token, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def arm(point: str, kind: str, token: str, slow_s: float = 0.0, kill_self: Callable[[], None] | None = None) -> None:
    """Arm this process (ray_kill needs `kill_self`)."""
    if point not in POINTS:
        raise ValueError(f"unknown fault point {point!r}; choose one of {sorted(POINTS)}")
    if kind not in KINDS:
        raise ValueError(f"unknown fault kind {kind!r}; choose one of {list(KINDS)}")
    _armed[point] = Armed(kind, token, slow_s, kill_self)


def disarm() -> None:
    _armed.clear()
