"""Can the cluster ever hold this run's actors? Checked right after connecting, so a role asking
for more than any node has fails in seconds naming the role and the resource, instead of a
placement group waiting forever for a node that will never come.

With an autoscaler the missing node may still be added: then relay says what it waits for and waits.
"""

from __future__ import annotations

import time

import ray

from relay.config import ConfigError, RoleResources
from relay.failures import RunFailed

KEYS = {"CPU": "cpus", "GPU": "gpus"}

# Share of a role's node label each actor asks for: small, so the label marks node types
# without limiting how many actors a node takes (CPU and GPU do that).
NODE_RESOURCE_SHARE = 0.001


def role_bundle(res: RoleResources) -> dict[str, float]:
    """The placement-group bundle one actor of the role asks for."""
    bundle = {k: v for k, v in (("CPU", res.cpus), ("GPU", res.gpus)) if v > 0}
    if res.node_resource:
        bundle[res.node_resource] = NODE_RESOURCE_SHARE
    return bundle


def check_feasible(bundles_by_role: dict[str, tuple[RoleResources, dict[str, float]]]) -> None:
    """Raise ConfigError (one line per problem) when no node can hold a role's actor or the whole
    cluster cannot hold every actor at once; with an autoscaler, print what it waits for instead."""
    problems = unplaceable(bundles_by_role, alive_nodes())
    if not problems:
        return
    if autoscaler_configured():
        print(
            "relay: waiting for the autoscaler to add nodes: " + "; ".join(problems),
            flush=True,
        )
        return
    raise ConfigError([f"{p} (and no autoscaler is configured to add one)" for p in problems])


def wait_placed(groups: list, timeout_s: float, say_after_s: float = 20.0) -> None:
    """Wait until every placement group in `groups` is placed. A node can be big enough and still
    full (another run, another job): after `say_after_s` one line names the groups still waiting and
    what the cluster has free; past `timeout_s` (resources.placement_timeout_s) RunFailed says the same."""
    pending = {group.ready(): group for group in groups}
    start, said = time.monotonic(), False
    while pending:
        waited = time.monotonic() - start
        if waited >= timeout_s:
            raise RunFailed(
                f"the Ray cluster has no room for {unplaced(pending.values())} after {timeout_s:g} s "
                f"(resources.placement_timeout_s); {free_resources()}"
            )
        until = timeout_s if said else min(say_after_s, timeout_s)
        ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=max(until - waited, 0.0))
        for ref in ready:
            ray.get(ref)
            del pending[ref]
        if pending and not said and time.monotonic() - start >= say_after_s:
            more = "; the autoscaler may add a node" if autoscaler_configured() else ""
            print(
                f"relay: waiting for room: {unplaced(pending.values())} not placed after {say_after_s:g} s; "
                f"{free_resources()}{more} (up to {timeout_s:g} s, resources.placement_timeout_s)",
                flush=True,
            )
            said = True


def unplaced(groups) -> str:
    """Each group's name and what its bundles ask for: "run/rollout (2 x 1 CPU)"."""
    parts = []
    for group in groups:
        table = ray.util.placement_group_table(group)
        bundles = list(table.get("bundles", {}).values())
        ask = ", ".join(f"{v:g} {k}" for k, v in (bundles[0] if bundles else {}).items())
        parts.append(f"{table.get('name') or 'a placement group'} ({len(bundles)} x {ask})")
    return ", ".join(parts)


def free_resources() -> str:
    """What the cluster has free of CPU and GPU, against its totals."""
    free, total = ray.available_resources(), ray.cluster_resources()
    have = [f"{free.get(k, 0.0):g} of {total[k]:g} {k}" for k in KEYS if total.get(k)]
    return f"the cluster has {', '.join(have) or 'nothing'} free (other runs or jobs hold the rest)"


def alive_nodes() -> list[dict[str, float]]:
    """Each live node's total resources."""
    return [n["Resources"] for n in ray.nodes() if n.get("Alive")]


def unplaceable(
    bundles_by_role: dict[str, tuple[RoleResources, dict[str, float]]], nodes: list[dict[str, float]]
) -> list[str]:
    """What no node of `nodes` (each its total resources) can hold, naming the config key.
    `bundles_by_role`: role -> (its resources, the bundle one of its actors asks for)."""
    problems = []
    for role, (res, bundle) in bundles_by_role.items():
        for resource, amount in bundle.items():
            if any(node.get(resource, 0.0) >= amount for node in nodes):
                continue
            if resource in KEYS:
                largest = max((node.get(resource, 0.0) for node in nodes), default=0.0)
                problems.append(
                    f"resources.{role}.{KEYS[resource]}={amount:g}: no node of the Ray cluster has {amount:g} "
                    f"{resource} (the largest has {largest:g})"
                )
            else:
                problems.append(
                    f"resources.{role}.node_resource={res.node_resource!r}: no node of the Ray cluster declares "
                    f"the resource {resource!r}"
                )
    if problems:
        return problems
    for resource, key in KEYS.items():  # every actor lives at once: the roles' sum must fit the cluster
        need = {role: res.count * bundle.get(resource, 0.0) for role, (res, bundle) in bundles_by_role.items()}
        have = sum(node.get(resource, 0.0) for node in nodes)
        if sum(need.values()) > have + 1e-9:
            parts = ", ".join(f"{role} {n:g}" for role, n in need.items() if n)
            problems.append(
                f"resources.*.{key}: the roles need {sum(need.values()):g} {resource} in all ({parts}; "
                f"count x {key}) but the Ray cluster has {have:g}"
            )
    return problems


def autoscaler_configured() -> bool:
    """Whether nodes may still be added: Ray's autoscaler v2 (what `ray up` starts since Ray 2.50,
    and KubeRay) says so in the GCS, or the GCS holds a cluster config with node types that can
    scale up, or the v1 autoscaler runs with a config of node types. Anything unreadable counts as
    "maybe", so a real autoscaling cluster is never refused."""
    try:
        from ray._private.state import state
        from ray.autoscaler.v2.utils import is_autoscaler_v2

        if is_autoscaler_v2(fetch_from_server=True):
            return True
        config = state.get_cluster_config()
        if config is None:
            return v1_autoscaler_has_node_types()
    except Exception:  # private APIs: a Ray that moved them leaves the decision to the old behaviour
        return True
    return bool(config) and any(
        g.max_count == -1 or g.max_count > g.min_count for g in config.node_group_configs if g.max_count != 0
    )


def v1_autoscaler_has_node_types() -> bool:
    """The v1 autoscaler (`ray start --head --autoscaling-config=...`, the fake multi-node provider
    of cluster.local.yaml) writes no cluster config to the GCS, only its status report, which maps
    each node to its node type. Every head runs that monitor; without a config its provider is
    read-only and names each node's type `node_<node id>` (ray.autoscaler._private.util,
    format_readonly_node_type): any other name is a type from a config, which may add nodes."""
    import json
    import re

    from ray._private import ray_constants
    from ray.experimental.internal_kv import _internal_kv_get

    status = _internal_kv_get(ray_constants.DEBUG_AUTOSCALING_STATUS)
    if not status:
        return False
    mapping = (json.loads(status).get("autoscaler_report") or {}).get("node_type_mapping") or {}
    return any(not re.fullmatch(r"node_[0-9a-f]{56}", node_type) for node_type in mapping.values())
