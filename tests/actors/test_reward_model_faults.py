"""A RewardModel actor that dies is rebuilt by Ray (resources.max_restarts) and the shard it was
scoring is scored again on the replacement: same scores, counted in faults/*."""

from __future__ import annotations

import os
import signal

import pytest
import ray

from actors.reward_model import RewardModel
from actors.supervision import Supervisor
from relay.config import RoleResources, load_config
from relay.config.role_settings import RewardModelSettings, RewardPoolSettings
from relay.envs.arithmetic import make_rows
from relay.models.shipped import RM_NAME, shipped_model
from relay.types import Sample
from relay_trainer.pools import create_group
from relay_trainer.reward_model_pool import RewardModelPool


def samples() -> list[Sample]:
    rows = make_rows(6, 5, 2)
    return [
        Sample(
            prompt_ids=[],
            response_text=r["ground_truth"],
            meta={"messages": [{"role": "user", "content": r["prompt"]}]},
        )
        for r in rows
    ]


def test_a_killed_reward_model_is_restarted_and_its_shard_scored_again(shared_ray):
    cfg = load_config(None, ["reward_model.path=tiny-rm", "reward_model.rule_weight=0"])
    groups: list = []
    make_args = lambda i: (RewardModelSettings.of(cfg), str(shipped_model(RM_NAME)), i, 1)  # noqa: E731
    handles = create_group(
        RewardModel, "reward_model", RoleResources(count=1, cpus=0.5), "rm-faults", make_args, groups, 2
    )
    faults = Supervisor(timeout_s=60.0, rollout_timeout_s=120.0, log=lambda line: None)
    pool = RewardModelPool(RewardPoolSettings.of(cfg), handles, faults)
    first = samples()
    pool.score(first)
    assert faults.take()["faults/restarts"] == 0
    pid = ray.get(handles[0].__ray_call__.remote(lambda self: os.getpid()))
    os.kill(pid, signal.SIGKILL)  # dies before (or while) it gets the next shard
    again = samples()
    pool.score(again)
    assert [s.reward for s in again] == pytest.approx([s.reward for s in first], abs=1e-6)
    counts = faults.take()
    assert counts["faults/restarts"] == 1 and counts["faults/retried_calls"] == 1
    for pg in groups:
        ray.util.remove_placement_group(pg)
