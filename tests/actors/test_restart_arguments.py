"""Restartable actors get their constructor arguments inline, never from the object store.

Ray puts an actor's constructor arguments in the object store when one is an actor handle (or
is large), and then logs at error level that a restart may fail once they go out of scope.
The rollout workers of a task with tools and an environment pool once
got those actors' handles; they now get their names (relay_trainer/pools.py) and look them up.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import ray

from relay.config import load_config
from relay.run.model_source import resolve_model_path
from relay.run.rows import task_rows
from relay.tools.sandbox import SandboxConfig, sandbox_available
from relay_trainer.pools import actor_pools

REPO = Path(__file__).resolve().parents[2]
RAY_ERROR = "constructor arguments in the object store"

pytestmark = [
    pytest.mark.skipif(not sandbox_available(SandboxConfig())[0], reason="the code sandbox cannot be built here"),
    pytest.mark.usefixtures("shared_ray"),
]


def test_tool_task_actors_start_without_arguments_in_the_object_store(capfd):
    cfg = load_config(
        REPO / "configs/math_tool.yaml",
        ["rollout.n=2", "tools.executors.cpus=0.1", "resources.env.cpus=0.1", "resources.rollout.cpus=0.5"],
    )
    assert cfg.resources.max_restarts > 0  # restartable: where Ray checks the arguments
    path = resolve_model_path(cfg.model, cfg.task, cfg.tools, cfg.critic, cfg.reward_model)
    with actor_pools(cfg, path, "restart-args") as actors:
        assert actors.env and actors.tools
        # the worker found its environment pool and executors by name: an episode ran on them
        rows = task_rows(cfg.task, cfg.tools, cfg.run.seed)[0][:1]
        samples, _ = ray.get(actors.rollout[0].rollout.remote(rows, 0, 0))
        assert len(samples) == 2 and all(s.meta["env"]["error"] is None for s in samples)
    assert RAY_ERROR not in capfd.readouterr().err
