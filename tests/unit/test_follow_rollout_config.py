"""follow_rollout on environment pools and tool executors (relay/config/roles.py): the config's
lines for what it cannot do, the counts it makes, and the names each rollout worker looks up."""

from __future__ import annotations

import pytest

from relay.config import ConfigError, load_config
from relay_trainer.followers import places_in, worker_bundles, worker_links
from relay_trainer.pools import actor_bundles, actor_name, actor_roles

TOOL_TASK = "configs/math_tool.yaml"  # an environment pool and tool executors
FOLLOW = ["resources.env.follow_rollout=true", "tools.executors.follow_rollout=true"]


def test_following_roles_count_per_rollout_worker():
    cfg = load_config(TOOL_TASK, [*FOLLOW, "resources.rollout.count=4", "tools.executors.count=2"])
    roles = actor_roles(cfg)
    assert roles["env"].count == 4 and roles["tools"].count == 8
    # an elastic pool starts its min; the autoscaler is asked for max workers' followers too
    elastic = load_config(TOOL_TASK, [*FOLLOW, "resources.rollout.count={min: 1, max: 4}"])
    assert actor_roles(elastic)["env"].count == 1
    rollout, env, tools = (
        {"CPU": r.cpus} for r in (cfg.resources.rollout, cfg.resources.env, cfg.tools.executors)
    )
    assert worker_bundles(cfg) == [rollout, tools, tools, env]
    assert len(actor_bundles(cfg)) == 1 + 4 + 8 + 4  # learner, the workers, their tools and EnvPools


def test_null_colocate_gives_the_followers_rollout_workers_of_their_own():
    assert load_config(TOOL_TASK).resources.colocate is True
    assert load_config(TOOL_TASK, FOLLOW[:1]).resources.colocate is False


def test_what_following_cannot_do_is_refused_in_one_line_each():
    with pytest.raises(ConfigError) as e:
        load_config(
            TOOL_TASK,
            [*FOLLOW, "resources.colocate=true", "resources.env.count=2", "tools.executors.node_resource=tool_node"],
        )
    lines = str(e.value).splitlines()[1:]
    assert len(lines) == 4, lines
    assert sum("(resources.colocate=true)" in line for line in lines) == 2
    assert any(line.strip().startswith("- resources.env.count: must be 1 with follow_rollout") for line in lines)
    assert any("tools.executors.node_resource: 'tool_node' with follow_rollout" in line for line in lines)


def test_a_role_the_run_does_not_use_follows_nothing():
    cfg = load_config("configs/default.yaml", FOLLOW)  # no environment pool, no tools
    assert "env" not in actor_roles(cfg) and "tools" not in actor_roles(cfg)
    assert cfg.resources.colocate is True


def test_each_worker_finds_its_own_followers_by_name():
    cfg = load_config(TOOL_TASK, [*FOLLOW, "resources.rollout.count=2", "tools.executors.count=2"])
    shared = {"env": ["run/env-0"], "tools": ["run/tools-0"]}
    pool_of, tools_of = worker_links(cfg, shared, lambda role, i: actor_name("run", role, i))
    assert pool_of(1) == "run/env-1" and tools_of(1) == ["run/tools-2", "run/tools-3"]
    assert [i for _, _, i in places_in("group", cfg, 1)["tools"]] == [2, 3]  # the same actors' indices
    assert [b for _, b, _ in places_in("group", cfg, 1)["env"]] == [3]  # bundles: worker, 2 tools, env

    # without follow_rollout every worker shares the run's pools
    plain = load_config(TOOL_TASK, ["resources.rollout.count=2", "resources.colocate=false"])
    pool_of, tools_of = worker_links(plain, shared, lambda role, i: actor_name("run", role, i))
    assert pool_of(1) == "run/env-0" and tools_of(1) == ["run/tools-0"]
