"""Arming a live run for one fault at a named point (relay/fault_points.py): every actor of the
run, through `__ray_call__` (actors/fault_arming.py), and the driver for the kinds it can take."""

from __future__ import annotations

import time
from pathlib import Path

import ray

from actors.fault_arming import arm_actor
from relay.fault_points import PROCESS_KINDS, arm


def arm_run(run_name: str, point: str, kind: str, token_dir: str | Path, slow_s: float = 0.0) -> Path:
    """Arm every live actor of the run named `run_name` (and, for the kinds a driver can take, this
    process) for one fault at `point`. Returns the token file: it exists once the fault happened."""
    token = Path(token_dir) / f"fault-{point}-{kind}-{time.monotonic_ns()}"
    names = ray.util.list_named_actors()  # this job's namespace: relay's
    handles = [ray.get_actor(n) for n in names if n.startswith(f"{run_name}/")]
    # an actor's calls queue behind the one it is making: a worker busy for seconds arms after it
    ray.get([h.__ray_call__.remote(arm_actor, point, kind, str(token), slow_s) for h in handles])
    if kind not in PROCESS_KINDS:
        arm(point, kind, str(token), slow_s)
    return token
