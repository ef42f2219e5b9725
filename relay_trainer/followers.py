"""Where a rollout worker and the roles that follow it go (relay/config/roles.py): one placement
group per worker, its bundles the worker's and then each following role's, STRICT_PACK so Ray
places the whole group on one node (and, after a node loss, again on one node).

Worker i's EnvPool is env-i and its tool executors are tools-{i*k} .. tools-{i*k+k-1} (k: the
executors' count per worker), so a restarted worker, or one an elastic pool adds, finds its own
by name.
"""

from __future__ import annotations

import ray
from ray.util.placement_group import placement_group

from relay.config import Config
from relay.config.elastic import fixed
from relay.config.roles import followers
from relay_trainer.feasibility import role_bundle


def worker_bundles(cfg: Config) -> list[dict[str, float]]:
    """One rollout worker's group: its bundle, then its followers' (role order of followers())."""
    return [role_bundle(cfg.resources.rollout)] + [
        role_bundle(res) for res in followers(cfg).values() for _ in range(res.count)
    ]


def worker_group(cfg: Config, run_name: str, index: int):
    """Worker `index`'s placement group (created, not yet placed: Ray places it when a node has room)."""
    return placement_group(worker_bundles(cfg), strategy="STRICT_PACK", name=f"{run_name}/rollout-{index}")


def places_in(group, cfg: Config, index: int) -> dict[str, list[tuple]]:
    """Worker `index`'s actors in its group: role -> [(group, bundle index, actor index)], as
    pools.create_group takes them."""
    places, bundle = {"rollout": [(group, 0, index)]}, 1
    for role, res in followers(cfg).items():
        places[role] = [(group, bundle + j, index * res.count + j) for j in range(res.count)]
        bundle += res.count
    return places


def worker_places(cfg: Config, run_name: str, groups: list) -> dict[str, list[tuple]]:
    """Where the run's first rollout workers and the roles that follow them go: a group per worker,
    appended to `groups`; {} where no role follows, or inside a Ray Tune trial's placement group
    (which holds every bundle already)."""
    if not followers(cfg) or cfg.resources.colocate or ray.util.get_current_placement_group() is not None:
        return {}
    places: dict[str, list[tuple]] = {}
    for i in range(fixed(cfg.resources.rollout).count):
        groups.append(group := worker_group(cfg, run_name, i))
        for role, where in places_in(group, cfg, i).items():
            places.setdefault(role, []).extend(where)
    return places


def worker_links(cfg: Config, names: dict[str, list[str]], name_of):
    """pool_of(i) and tools_of(i): the names of rollout worker i's EnvPool (or None) and tool
    executors; its own where the role follows it (`name_of(role, index)`: pools.actor_name for the
    run), else the run's shared ones (`names[role]`: every actor's name)."""
    follow = followers(cfg)

    def pool_of(i: int) -> str | None:
        if "env" in follow:
            return name_of("env", i)
        return names["env"][i % len(names["env"])] if names["env"] else None

    def tools_of(i: int) -> list[str]:
        if "tools" in follow:
            k = follow["tools"].count
            return [name_of("tools", i * k + j) for j in range(k)]
        return names["tools"]

    return pool_of, tools_of
