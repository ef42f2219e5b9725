"""Arming an actor for one fault at a named point (relay/fault_points.py), run inside it through
`__ray_call__` by relay_trainer/fault_arming.py, which arms every actor of a live run."""

from __future__ import annotations

import ray

from relay.fault_points import arm


def kill_self() -> None:
    """The ray_kill kind: the actor asks Ray to kill it, restart allowed, as an operator would."""
    ray.kill(ray.get_runtime_context().current_actor, no_restart=False)


def arm_actor(_actor_self, point: str, kind: str, token: str, slow_s: float) -> None:
    arm(point, kind, token, slow_s, kill_self)
