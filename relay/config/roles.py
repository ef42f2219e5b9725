"""Which helper roles a run has, and which of them follow their rollout worker.

    resources:
      rollout: {count: {min: 1, max: 4}, cpus: 4, node_resource: rollout_node}
      env: {count: 1, cpus: 1, follow_rollout: true}      # each worker's own EnvPool
    tools:
      executors: {count: 2, cpus: 0.5, follow_rollout: true}  # each worker's own 2 executors

A role that follows its rollout worker has `count` actors per worker (an EnvPool: exactly one, the
one the worker talks to), placed with the worker in one placement group that Ray puts on one node
(STRICT_PACK): environment steps and tool calls stay on the worker's machine, and a worker that an
elastic pool adds on a new node brings its environments and tools there, and takes them along when
it leaves. Without follow_rollout a role's `count` actors serve every worker from wherever they
were placed. Inside a Ray Tune trial the trial's placement group holds every bundle and decides
where they go (relay_trainer/tune.py).
"""

from __future__ import annotations

from relay.config.resources import FollowerResources


def uses_tool_executors(cfg) -> bool:
    """Tool calls run on ToolExecutor actors; with tools.server_url they go to that server instead."""
    return cfg.tools.enabled and cfg.tools.server_url is None


def uses_env_pools(cfg) -> bool:
    """Environments, and rewards marked heavy (task.reward_actor), run on EnvPool actors; a plain
    reward function runs inside the rollout worker that made the samples (no actor, no round trip)."""
    return bool(cfg.task.env) or cfg.task.reward_actor or bool(cfg.task.agent)  # task.agent: the programs run there


def followers(cfg) -> dict[str, FollowerResources]:
    """The run's roles that follow each rollout worker ("tools", "env"), with their per-worker resources."""
    roles = {"tools": cfg.tools.executors} if uses_tool_executors(cfg) else {}
    if uses_env_pools(cfg):
        roles["env"] = cfg.resources.env
    return {role: res for role, res in roles.items() if res.follow_rollout}


def validate_followers(cfg) -> list[str]:
    """What following a rollout worker needs of the rest of the config (`cfg`: a Config)."""
    keys = {"tools": "tools.executors", "env": "resources.env"}
    p = []
    for role, res in followers(cfg).items():
        key = keys[role]
        if cfg.resources.colocate:
            p.append(
                f"{key}.follow_rollout: the one rollout worker is the learner (resources.colocate=true); "
                "set resources.colocate=false to give rollout workers of their own"
            )
        if role == "env" and res.count != 1:
            p.append(
                f"{key}.count: must be 1 with follow_rollout (a rollout worker talks to one EnvPool), got {res.count}"
            )
        if res.node_resource is not None:
            p.append(
                f"{key}.node_resource: {res.node_resource!r} with follow_rollout: the role goes on its rollout "
                "worker's node (resources.rollout.node_resource); leave it unset"
            )
    return p
