"""Restartable roles on local Ray: a rollout worker, an environment pool and a tool executor that
die (SIGKILL of the process, ray.kill) or hang (SIGSTOP) are replaced, and the work each owned
is redone on the replacement: the redone rollout equals the undisturbed one, token for token.

One run of actors (configs/math_tool.yaml: tool calls in the real sandbox, environment steps on
the EnvPool) serves every test of this module; deadlines are short so hangs are found quickly.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import ray

from relay.config import load_config
from relay.envs.math_tool import make_rows
from relay.run.model_source import resolve_model_path
from relay.tools.sandbox import SandboxConfig, sandbox_available
from relay_trainer import steps
from relay_trainer.pools import actor_pools
from relay_trainer.weights import sync_weights

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(
    not sandbox_available(SandboxConfig())[0], reason="the code sandbox cannot be built here"
)
# Two hangs below are each found at CALL_TIMEOUT_S: a few seconds, far above a healthy tool call
# (about 40 ms in the sandbox) or environment step of the tiny model, and no longer than that.
CALL_TIMEOUT_S, ROLLOUT_TIMEOUT_S = 4.0, 60.0


@pytest.fixture(scope="module")
def actors(shared_ray):
    cfg = load_config(
        REPO / "configs/math_tool.yaml",
        [
            "rollout.n=2",
            "training.prompts_per_step=4",
            "tools.executors.cpus=0.1",
            "resources.env.cpus=0.1",
            "resources.rollout.cpus=0.5",
            "resources.learner.cpus=0.5",
            "resources.max_restarts=10",
            "resources.colocate=false",  # a rollout worker of its own, killed below
            f"resources.call_timeout_s={CALL_TIMEOUT_S}",
            f"resources.rollout_timeout_s={ROLLOUT_TIMEOUT_S}",
        ],
    )
    path = resolve_model_path(cfg.model, cfg.task, cfg.tools, cfg.critic, cfg.reward_model)
    with actor_pools(cfg, path, "test-faults") as actors:
        sync_weights(actors, version=1)
        yield actors


def pid(handle) -> int:
    return ray.get(handle.__ray_call__.remote(lambda self: os.getpid()))


def episodes(samples) -> list:
    """What training reads from a batch (ids, logprobs, masks, rewards), not labels such as episode ids."""
    return [
        (s.group_id, s.prompt_ids, s.response_ids, s.rollout_logprobs, s.loss_mask, s.weight_version, s.reward)
        for s in samples
    ]


def rollout_and_score(actors):
    samples, _ = steps.rollout(actors, make_rows(4, seed=5), seed_round=3)
    steps.count_failures(samples)  # the workers scored them (on their EnvPool); this counts failures
    return episodes(samples), actors.faults.take()


def test_each_role_dies_or_hangs_and_its_work_is_redone_on_the_replacement(actors):
    undisturbed, counts = rollout_and_score(actors)
    assert len(undisturbed) == 8 and not any(counts.values())
    assert any(s[5] == 1 for s in undisturbed)  # on the weights sent, version 1

    # a rollout worker SIGKILLed between calls: Ray restarts it from the model path (version 0);
    # its shard comes back on stale weights, so the weights are re-sent and the shard redone
    os.kill(pid(actors.rollout[0]), signal.SIGKILL)
    redone, counts = rollout_and_score(actors)
    assert redone == undisturbed
    assert counts["faults/retried_shards"] == 1 and counts["faults/restarts"] >= 1

    # a tool executor that hangs under a call: the worker's deadline kills it, the share is rerun
    os.kill(pid(actors.tools[0]), signal.SIGSTOP)
    redone, counts = rollout_and_score(actors)
    assert redone == undisturbed
    assert counts["faults/timeouts"] == 1 and counts["faults/retried_calls"] >= 1

    # an environment pool that hangs under a step: its episodes are gone, the shard is redone
    os.kill(pid(actors.env[0]), signal.SIGSTOP)
    redone, counts = rollout_and_score(actors)
    assert redone == undisturbed
    assert counts["faults/timeouts"] == 1 and counts["faults/retried_shards"] == 1

    # an environment pool killed by ray.kill (restart allowed) between steps: the next shard runs on its replacement
    ray.kill(actors.env[0], no_restart=False)
    redone, counts = rollout_and_score(actors)
    assert redone == undisturbed and counts["faults/duplicated_samples"] == 0


@pytest.mark.slow
def test_a_hung_rollout_worker_is_killed_at_its_deadline_and_the_shard_redone(actors):
    undisturbed, _ = rollout_and_score(actors)
    os.kill(pid(actors.rollout[0]), signal.SIGSTOP)
    redone, counts = rollout_and_score(actors)
    assert redone == undisturbed
    assert counts["faults/timeouts"] == 1 and counts["faults/retried_shards"] == 1


def test_a_pool_restarted_between_two_steps_loses_the_shard_and_a_bug_stays_a_bug(actors):
    from actors.restarts import wait_restarted
    from actors.supervision import EnvPoolCalls, ShardLost, Supervisor

    pool = EnvPoolCalls(actors.env[0], Supervisor(CALL_TIMEOUT_S, ROLLOUT_TIMEOUT_S), "test env")
    pool.reset(["between-0"], make_rows(1, seed=1))
    os.kill(pid(actors.env[0]), signal.SIGKILL)
    assert wait_restarted(actors.env[0], ROLLOUT_TIMEOUT_S)
    with pytest.raises(ShardLost, match="restarted between calls"):
        pool.step(["between-0"], ["42"])
    pool.reset(["between-1"], make_rows(1, seed=1))
    with pytest.raises(KeyError):  # an id the same pool never held: a programming error, raised as one
        pool.step(["never-started"], ["42"])
