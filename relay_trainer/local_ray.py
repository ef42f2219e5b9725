"""The local Ray that relay starts when no cluster is named, and what it may do with it later.

relay owns a Ray it started: when a later run in the same process (a second `fit`, a script
training two configs, a benchmark running several tasks) needs more than it holds, relay stops
it and starts one of the right size. A Ray the user started or joined is never stopped; then the
feasibility check refuses in one line (relay_trainer/feasibility.py).
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import ray

NAMESPACE = "relay"

# What relay started in this process: the GCS address of its local Ray and whether it has the
# dashboard, while that Ray runs. Ray's worker processes import this module too, never starting it.
_started: dict | None = None


def start(num_cpus: float, dashboard: bool) -> None:
    """Start a local Ray with `num_cpus` logical CPUs that serves this machine only."""
    global _started
    # Sync phases do not overlap, so logical CPUs may exceed the cores; torch threads per actor
    # keep actors from fighting. address="local": never attach to a cluster in /tmp/ray/ray_current_cluster.
    with loopback_node(), any_agent_port():
        ray.init(
            address="local",
            num_cpus=max(os.cpu_count() or 1, int(num_cpus + 0.999)),
            namespace=NAMESPACE,
            include_dashboard=dashboard,
            log_to_driver=True,
            # no idle workers started ahead: each role is an actor with a process of its own (40 MB saved)
            _system_config={"prestart_worker_first_driver": False},
        )
    _started = {"address": _gcs_address(), "dashboard": dashboard}


def started_here() -> bool:
    """Whether the Ray this process is connected to is the one relay started (not one the user
    started after relay's stopped, nor a cluster joined by address)."""
    return _started is not None and ray.is_initialized() and _gcs_address() == _started["address"]


def has_dashboard() -> bool:
    return bool(_started and _started["dashboard"])


def stop() -> None:
    """Stop relay's own Ray (the earlier runs' actors are gone by then: actor_pools killed them)."""
    global _started
    if started_here():
        ray.shutdown()
    _started = None


def _gcs_address() -> str:
    return ray.get_runtime_context().gcs_address


@contextmanager
def any_agent_port():
    """The dashboard agent of a Ray started inside it listens on a free port, not Ray's fixed 52365.

    ray.init has no argument for it, and with the fixed port a second local Ray on the machine (a
    second run, a test beside a run) fails to start: its raylet waits for an agent that could not
    bind ("node timed out during startup"). Nothing of a local Ray reads the port from anywhere but
    the GCS, which the agent tells. ray.init builds its RayParams by attribute lookup, so a subclass
    defaulting the port to None (= any, as ray.cluster_utils gives its extra nodes) does it.
    """
    from ray._private import parameter

    original = parameter.RayParams

    class AnyAgentPort(original):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("dashboard_agent_listen_port", None)
            super().__init__(*args, **kwargs)

    parameter.RayParams = AnyAgentPort
    try:
        yield
    finally:
        parameter.RayParams = original


@contextmanager
def loopback_node():
    """A Ray started inside it serves this machine only: every port it opens (the Prometheus
    metrics export, GCS, raylet, dashboard agent) listens on 127.0.0.1, not on all interfaces.

    Ray binds them to its node address, and the metrics export to all interfaces unless that
    address is loopback. ray.init turns a loopback `_node_ip_address` into the machine's outward
    address, so the one switch is Ray's cluster mode: off, the node address is 127.0.0.1. Ray
    reads it from RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER (named for the systems where off is the
    default) once, at import, into ray_constants.ENABLE_RAY_CLUSTER; the processes ray.init
    starts read the variable, this one the constant. Both go back to what they were afterwards.
    """
    from ray._private import ray_constants

    saved_env, saved_constant = os.environ.get(LOCAL_ONLY_ENV), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[LOCAL_ONLY_ENV], ray_constants.ENABLE_RAY_CLUSTER = "0", False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved_constant
        if saved_env is None:
            os.environ.pop(LOCAL_ONLY_ENV, None)
        else:
            os.environ[LOCAL_ONLY_ENV] = saved_env


LOCAL_ONLY_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
