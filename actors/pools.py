"""Resource pools = placement groups; actors are created on them, named by role."""
from __future__ import annotations

import os
from dataclasses import dataclass

import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from actors.env import EnvPool
from actors.learner import Learner, Reference
from actors.rollout import RolloutWorker
from relay.config import Config, RoleResources

NAMESPACE = "relay"


def connect(cfg: Config) -> None:
    """Join the cluster named by config or RAY_ADDRESS (set by `ray job submit`); else start one."""
    if ray.is_initialized():
        return
    address = cfg.resources.ray_address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, namespace=NAMESPACE)
        return
    needed = sum(getattr(cfg.resources, role).cpus * getattr(cfg.resources, role).count for role in ("rollout", "learner", "reference", "env"))
    # Phases of the synchronous loop do not overlap, so logical CPUs may exceed the cores;
    # torch threads per actor (its CPU share) are what keep actors from fighting.
    ray.init(num_cpus=max(os.cpu_count() or 1, int(needed + 0.999)), namespace=NAMESPACE,
             include_dashboard=cfg.resources.dashboard, log_to_driver=True)


def _bundle(res: RoleResources) -> dict[str, float]:
    return {k: v for k, v in (("CPU", res.cpus), ("GPU", res.gpus)) if v > 0}


def create_group(cls, role: str, res: RoleResources, run_name: str, make_args) -> list:
    """`res.count` actors of `cls`, one bundle each, named `<run>/<role>-<i>` for the dashboard."""
    pg = placement_group([_bundle(res)] * res.count, strategy="PACK", name=f"{run_name}/{role}")
    ray.get(pg.ready(), timeout=600)
    remote_cls = ray.remote(cls)
    return [
        remote_cls.options(
            name=f"{run_name}/{role}-{i}", num_cpus=res.cpus, num_gpus=res.gpus,
            scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i),
        ).remote(*make_args(i))
        for i in range(res.count)
    ]


def threads(res: RoleResources) -> int:
    return max(1, int(res.cpus))


@dataclass
class Actors:
    rollout: list
    env: list
    learner: object
    reference: object | None


def create_actors(cfg: Config, model_path: str, run_name: str) -> Actors:
    res = cfg.resources
    needs_reference = cfg.algorithm.kl_coef > 0
    return Actors(
        rollout=create_group(RolloutWorker, "rollout", res.rollout, run_name, lambda i: (cfg, model_path, i, threads(res.rollout))),
        env=create_group(EnvPool, "env", res.env, run_name, lambda i: (cfg,)),
        learner=create_group(Learner, "learner", res.learner, run_name, lambda i: (cfg, model_path, threads(res.learner)))[0],
        reference=create_group(Reference, "reference", res.reference, run_name, lambda i: (cfg, model_path, threads(res.reference)))[0] if needs_reference else None,
    )
