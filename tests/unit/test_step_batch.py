"""relay/update/batch.py: the learner (and the critic) build a step's Batch and advantages from its
samples inside `update`. The numbers are the ones the driver computed when it built the Batch
itself: the same functions in the same order (the old driver code is spelled out below)."""

import copy

import pytest
import torch

from actors.learner import Learner
from actors.rollout import RolloutWorker
from relay.algos.advantages import compute_advantages
from relay.algos.kl import kl_penalty
from relay.algos.registry import ESTIMATORS
from relay.algos.utils import masked_mean
from relay.config import load_config
from relay.config.role_settings import PolicySettings, RolloutSettings
from relay.run.metric_keys import KL_MEAN, REWARD_MEAN, REWARD_STD
from relay.run.rows import task_rows
from relay.types import Batch, Sample
from relay.update.batch import prepare_batch

SMALL = ["training.prompts_per_step=4", "rollout.n=4", "training.micro_batch_size=8"]


def driver_batch(samples, a, old=None, ref=None, values=None, kl_coef=0.0):
    """What driver.py's train_step did before the learner built the batch: (batch, kl mean)."""
    batch = Batch.from_samples(samples, pad_id=0)
    final_rewards = (
        batch.rewards - batch.token_rewards.sum(1) if ESTIMATORS[a.estimator].TRAITS.token_level else batch.rewards
    )
    batch.ref_logprobs, batch.old_logprobs, batch.values = ref, old, values
    kl_mean = None
    if a.kl_in == "reward" and ref is not None:
        kl = kl_penalty(batch.old_logprobs, batch.ref_logprobs, a.kl_estimator)
        kl_mean = masked_mean(kl, batch.loss_mask).item()
        batch.token_rewards -= kl_coef * kl * batch.loss_mask
    batch.advantages, batch.returns = compute_advantages(
        a.estimator,
        rewards=final_rewards,
        loss_mask=batch.loss_mask,
        group_ids=batch.group_ids,
        token_rewards=batch.token_rewards,
        values=batch.values,
        gamma=a.gamma,
        lam=a.lam,
    )
    return batch, kl_mean


@pytest.fixture(scope="module")
def rollouts(tiny_model_path):
    cfg = load_config(None, SMALL)
    worker = RolloutWorker(RolloutSettings.of(cfg), tiny_model_path, 0, 1)
    rows = task_rows(cfg.task, cfg.tools, cfg.run.seed)[0][:4]
    return [worker.rollout(rows, step, first_group_id=0)[0] for step in range(2)]


def test_the_learner_trains_on_samples_as_on_the_batch_the_driver_built(tiny_model_path, rollouts):
    cfg = load_config(None, SMALL)
    ours, theirs = (
        Learner(PolicySettings.of(cfg), tiny_model_path, 1),
        Learner(PolicySettings.of(cfg), tiny_model_path, 1),
    )
    for samples in rollouts:
        got = ours.update(samples, kl_coef=0.0)
        batch, _ = driver_batch(samples, cfg.algorithm)
        want = theirs.update(batch)
        for key in (
            "actor/loss",
            "actor/pg_loss",
            "actor/grad_norm",
            "actor/entropy",
            "rollout/logprob_diff_max",
            "rollout/logprob_diff_mean",
        ):
            assert got[key] == pytest.approx(want[key], rel=1e-6, abs=1e-6), key
        # the metrics the driver read from its batch come back with the update
        assert got[REWARD_MEAN] == batch.rewards.mean().item()
        assert got[REWARD_STD] == batch.rewards.std(correction=0).item()
        assert got["response/length_mean"] == batch.loss_mask.sum(1).mean().item()
        for (name, p), q in zip(ours.model.named_parameters(), theirs.model.parameters()):
            assert torch.allclose(p, q, atol=1e-6, rtol=0), name


@pytest.mark.parametrize("estimator", ["gae", "reinforce_plus_plus", "grpo"])
def test_kl_in_reward_and_values_give_the_drivers_numbers_exactly(rollouts, estimator):
    overrides = [*SMALL, f"algorithm.estimator={estimator}", "algorithm.kl_in=reward", "algorithm.kl_coef=0.1"]
    a = load_config(None, [*overrides, "critic.enabled=true"] if estimator == "gae" else overrides).algorithm
    samples = copy.deepcopy(rollouts[0])
    samples[0].token_rewards = {1: 0.5}  # an environment's per-token reward, where token-level estimators add it
    shape = Batch.from_samples(samples, pad_id=0).loss_mask.shape
    gen = torch.Generator().manual_seed(0)
    old, ref, values = (torch.randn(shape, generator=gen) for _ in range(3))
    inputs = {"old_logprobs": old, "ref_logprobs": ref, "values": values if estimator == "gae" else None}
    ours, metrics = prepare_batch(samples, a, kl_coef=0.1, **inputs)
    theirs, kl_mean = driver_batch(samples, a, old, ref, inputs["values"], kl_coef=0.1)
    for field in ("advantages", "returns", "token_rewards", "rewards", "loss_mask", "prompts", "responses"):
        assert torch.equal(getattr(ours, field), getattr(theirs, field)), field
    assert metrics[KL_MEAN] == kl_mean


def test_a_batch_of_failures_only_is_reported_and_not_trained_on(tiny_model_path):
    cfg = load_config(None, SMALL)
    learner = Learner(PolicySettings.of(cfg), tiny_model_path, 1)
    before = [p.detach().clone() for p in learner.model.parameters()]
    failed = [
        Sample(prompt_ids=[1, 2], response_ids=[3], loss_mask=[0], rollout_logprobs=[0.0], group_id=g) for g in (0, 0)
    ]
    metrics = learner.update(failed, kl_coef=0.0)
    assert set(metrics) == {REWARD_MEAN, REWARD_STD, "response/length_mean"}  # no actor/* metrics: no update ran
    assert all(torch.equal(p, q) for p, q in zip(learner.model.parameters(), before))
    assert learner.updates == 1  # the weights after the step carry its version, unchanged


def test_a_kl_penalty_in_the_reward_without_old_logprobs_is_a_programming_error(rollouts):
    a = load_config(None, [*SMALL, "algorithm.kl_in=reward", "algorithm.kl_coef=0.1"]).algorithm
    ref = torch.zeros(Batch.from_samples(rollouts[0], pad_id=0).loss_mask.shape)
    with pytest.raises(ValueError, match="needs the learner's old logprobs"):
        prepare_batch(rollouts[0], a, ref_logprobs=ref, kl_coef=0.1)
