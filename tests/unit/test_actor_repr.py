"""Each relay actor's __repr__: what the Ray dashboard's Repr column shows (Ray 2.60 calls it once,
right after __init__) and what Ray puts in the errors an actor raises (called then). The actors
are built in process here, as plain classes: the repr must follow the work without Ray."""

import pytest

from actors.colocated import ColocatedWorker
from actors.critic import Critic
from actors.env import EnvPool
from actors.learner import Learner, Reference
from actors.rollout import RolloutWorker
from actors.tools import ToolExecutor
from relay.config import load_config
from relay.config.role_settings import CriticSettings, PolicySettings, RolloutSettings
from relay.envs.arithmetic import make_rows
from relay.envs.scoring import Scorer
from relay.tools.calls import ToolCall
from relay.tools.registry import ToolRegistry, tool
from relay.types import Batch, Sample
from tests.unit.test_update_loop import make_batch


@pytest.fixture(scope="module")
def cfg():
    return load_config(None, ["rollout.n=2", "critic.enabled=true", "algorithm.estimator=gae"])


def test_rollout_worker_repr_follows_rollouts_and_weight_syncs(cfg, tiny_model_path):
    worker = RolloutWorker(RolloutSettings.of(cfg), tiny_model_path, worker_index=1, num_threads=1)
    assert repr(worker) == "RolloutWorker(rollout-1, weights v0, no rollout yet, 0 tok/s)"
    samples, metrics = worker.rollout(make_rows(2, 0, 2), step=0, first_group_id=0)
    assert metrics["rollout/tokens_per_s"] > 0
    assert (
        repr(worker)
        == f"RolloutWorker(rollout-1, weights v0, last rollout on v0, {metrics['rollout/tokens_per_s']:.0f} tok/s)"
    )
    learner = Learner(PolicySettings.of(cfg), tiny_model_path, num_threads=1)
    worker.update_weights(learner.get_weights(), version=3)
    assert repr(worker).startswith("RolloutWorker(rollout-1, weights v3, last rollout on v0, ")
    worker.rollout(make_rows(2, 1, 2), step=3, first_group_id=0)
    assert "weights v3, last rollout on v3, " in repr(worker)


def trained_batch() -> Batch:
    batch = make_batch()
    batch.advantages = batch.rewards[:, None] * batch.loss_mask
    batch.returns = batch.advantages
    return batch


def test_learner_critic_and_reference_reprs_count_updates_and_survive_a_checkpoint(cfg, tiny_model_path):
    learner, critic = (
        Learner(PolicySettings.of(cfg), tiny_model_path, num_threads=1),
        Critic(CriticSettings.of(cfg), tiny_model_path, num_threads=1),
    )
    reference = Reference(PolicySettings.of(cfg), tiny_model_path, num_threads=1)
    assert repr(learner) == "Learner(learner-0, weights v0, step 0, 0 tok/s, no update yet)"
    assert repr(critic) == "Critic(critic-0, step 0, 0 tok/s, no update yet)"
    assert repr(reference) == "Reference(reference-0, frozen weights v0, 0 batches scored)"

    batch = trained_batch()
    batch.old_logprobs = learner.compute_logprobs(batch)
    batch.ref_logprobs = reference.compute_logprobs(batch)
    batch.values = critic.compute_values(batch)
    for _ in range(2):
        learner.update(batch)
        critic.update(batch)
    tokens = float(batch.loss_mask.sum())
    assert repr(learner) == (
        f"Learner(learner-0, weights v2, step 2, {tokens / learner.update_seconds:.0f} tok/s, "
        f"last update {learner.update_seconds:.2f} s)"
    )
    assert repr(critic).startswith("Critic(critic-0, step 2, ") and "last update" in repr(critic)
    assert repr(reference) == "Reference(reference-0, frozen weights v0, 1 batches scored)"

    # A resumed run's actors report the step they resumed at, not 0.
    (_, learner_meta), (_, critic_meta) = learner.state(), critic.state()
    fresh_learner, fresh_critic = (
        Learner(PolicySettings.of(cfg), tiny_model_path, num_threads=1),
        Critic(CriticSettings.of(cfg), tiny_model_path, num_threads=1),
    )
    fresh_learner.load_state(*learner.state())
    fresh_critic.load_state(*critic.state())
    assert "weights v2, step 2, " in repr(fresh_learner)
    assert "step 2, " in repr(fresh_critic)
    assert learner_meta["updates"] == critic_meta["updates"] == 2


def test_env_pool_and_tool_executor_reprs_count_calls_and_errors(cfg):
    def flaky_reward(sample, env):
        if sample.reward < 0:
            raise ValueError("bad sample")
        return 1.0

    pool = EnvPool(cfg.task, index=2)
    pool.scorer = Scorer(flaky_reward)
    assert repr(pool) == "EnvPool(env-2, 0 calls, 0 errors)"
    samples = [Sample(prompt_ids=[1], response_ids=[2], loss_mask=[1], reward=r) for r in (0.0, -1.0, 0.0)]
    pool.score(samples)
    assert repr(pool) == "EnvPool(env-2, 3 calls, 1 errors)"

    @tool
    def halve(x: int) -> float:
        """Half of x.

        Args:
            x: an even number
        """
        if x % 2:
            raise ValueError("odd")
        return x / 2

    with pytest.warns(RuntimeWarning, match="WITHOUT A SANDBOX"):  # function tools only: no code runs
        executor = ToolExecutor(sandbox="none", registry=ToolRegistry([halve]), max_workers=2, index=1)
    try:
        assert repr(executor) == "ToolExecutor(tools-1, 0 calls, 0 errors)"
        calls = [ToolCall("halve", {"x": 4}), ToolCall("halve", {"x": 3}), ToolCall("nope", {})]
        assert [r.ok for r in executor.run_batch(calls)] == [True, False, False]
        assert repr(executor) == "ToolExecutor(tools-1, 3 calls, 2 errors)"
    finally:
        executor.close()


@pytest.mark.parametrize("cls", [RolloutWorker, Learner, Reference, Critic, EnvPool, ToolExecutor, ColocatedWorker])
def test_repr_of_an_instance_whose_init_failed(cls):
    """Ray calls __repr__ for the error of an __init__ that raised; a repr that raised in turn
    would replace that error with a worker crash (seen with an unbuildable sandbox)."""
    assert repr(object.__new__(cls)).startswith(cls.__name__ + "(")
