"""What one role's actors ask Ray for: how many, their CPUs and GPUs, and the node type they go to.
The rollout role's count may also be a range (relay/config/elastic.py); environment pools and tool
executors may follow their rollout worker (relay/config/roles.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RoleResources:
    count: int = 1
    cpus: float = 1.0
    gpus: float = 0.0
    # A custom resource only some node types declare (`ray start --resources=...`, cluster.yaml): the role's
    # actors go only there, each asking 0.001 of it, so the declared amount does not limit how many fit.
    node_resource: str | None = None


@dataclass(frozen=True)
class FollowerResources(RoleResources):
    # true: `count` actors per rollout worker, started with it on its node and gone with it
    # (relay/config/roles.py); false: `count` actors for the whole run, shared by every worker.
    follow_rollout: bool = False
