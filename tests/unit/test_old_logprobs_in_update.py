"""Where old logprobs come from (relay/config/resolved.py: old_logprobs_source). Without a KL
penalty in the reward the Learner finds them inside `update`: on-policy the detached logprobs of
the update's own forward pass, otherwise one no-grad pass; either way the update equals the one
with old logprobs computed beforehand (a separate learner call)."""

import pytest
import torch

from actors.learner import Learner
from relay.algos.kl import kl_penalty
from relay.algos.utils import masked_mean
from relay.config import load_config
from relay.config.resolved import BEFORE_UPDATE, RECOMPUTE, UPDATE_FORWARD, old_logprobs_source
from relay.config.role_settings import PolicySettings
from relay.run.metric_keys import KL_MEAN, LEARNER_UPDATE_S
from relay.types import Batch, Sample
from relay.update.old_logprobs import LOGPROB_DIFF_MAX

GRPO = ["training.micro_batch_size=3"]  # several micro-batches, one of 2 rows
PPO_CRITIC = ["algorithm.estimator=gae", "critic.enabled=true", "algorithm.tis_cap=2.0", "training.micro_batch_size=4"]
KL_LOSS = ["algorithm.kl_coef=0.1", "algorithm.kl_in=loss", "training.micro_batch_size=2"]


def make_batch(with_reference: bool) -> Batch:
    g = torch.Generator().manual_seed(0)
    samples = [
        Sample(
            prompt_ids=torch.randint(3, 30, (2 + i % 3,), generator=g).tolist(),
            response_ids=torch.randint(3, 30, (1 + i % 4,), generator=g).tolist(),
            loss_mask=[1] * (1 + i % 4),
            rollout_logprobs=(-torch.rand(1 + i % 4, generator=g) * 3).tolist(),  # an engine's, not the learner's
            reward=float(i % 2),
            group_id=i // 2,
        )
        for i in range(8)
    ]
    batch = Batch.from_samples(samples, pad_id=0)
    batch.advantages = (torch.randn(batch.loss_mask.shape, generator=g) * batch.loss_mask).float()
    if with_reference:
        batch.ref_logprobs = (batch.rollout_logprobs + 0.1 * torch.randn(batch.loss_mask.shape, generator=g)).float()
    return batch


def one_update(tiny_model_path, overrides: list[str], precompute: bool):
    """A fresh Learner's first update; (metrics, gradients before each optimizer step, old logprobs)."""
    learner = Learner(PolicySettings.of(load_config(None, overrides)), tiny_model_path, num_threads=1)
    grads = []
    learner.optimizer.register_step_pre_hook(
        lambda *_: grads.append({n: p.grad.clone() for n, p in learner.model.named_parameters()})
    )
    batch = make_batch(with_reference="algorithm.kl_coef=0.1" in overrides)
    old = learner.compute_logprobs(batch)
    if precompute:  # as for a KL penalty in the reward: a learner call before the update
        batch.old_logprobs = old
    metrics = learner.update(batch)
    return metrics, grads, old, batch


def largest_relative_difference(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max() / b[k].abs().max().clamp(min=1e-12)) for k in b)


@pytest.mark.parametrize("overrides", [GRPO, PPO_CRITIC, KL_LOSS], ids=["grpo", "ppo-critic", "kl-in-loss"])
def test_on_policy_update_equals_the_update_with_precomputed_old_logprobs(tiny_model_path, overrides):
    assert old_logprobs_source(load_config(None, overrides)) == UPDATE_FORWARD
    today, grads_today, old, batch = one_update(tiny_model_path, overrides, precompute=True)
    inside, grads_inside, _, _ = one_update(tiny_model_path, overrides, precompute=False)
    assert len(grads_today) == len(grads_inside) == 1
    worst = largest_relative_difference(grads_inside[0], grads_today[0])
    print(f"largest relative difference of a gradient tensor: {worst:.1e}")
    assert worst < 1e-5
    for key in ("actor/loss", "actor/pg_loss", "actor/entropy", "actor/grad_norm", LOGPROB_DIFF_MAX):
        assert inside[key] == pytest.approx(today[key], rel=1e-5, abs=1e-7), key
    assert inside["actor/ratio_mean"] == 1.0 and inside["actor/pg_clipfrac"] == 0.0
    # the metric the driver used to compute from its old logprobs
    driver_diff = float(((batch.rollout_logprobs - old).abs() * batch.loss_mask).max())
    assert inside[LOGPROB_DIFF_MAX] == pytest.approx(driver_diff, rel=1e-5)
    if batch.ref_logprobs is not None:
        driver_kl = masked_mean(kl_penalty(old, batch.ref_logprobs, "k3"), batch.loss_mask).item()
        assert inside[KL_MEAN] == pytest.approx(driver_kl, rel=1e-5)
        assert today[KL_MEAN] == pytest.approx(driver_kl, rel=1e-5)


@pytest.mark.parametrize("overrides", [["training.mini_batches=2"], ["training.ppo_epochs=2"]])
def test_off_policy_update_takes_one_no_grad_pass_with_the_same_numbers(tiny_model_path, overrides):
    assert old_logprobs_source(load_config(None, overrides)) == RECOMPUTE
    today, grads_today, _, _ = one_update(tiny_model_path, overrides, precompute=True)
    inside, grads_inside, _, _ = one_update(tiny_model_path, overrides, precompute=False)
    assert len(grads_today) == len(grads_inside) == 2
    for a, b in zip(grads_inside, grads_today):
        assert all(torch.equal(a[k], b[k]) for k in b)
    inside.pop(LEARNER_UPDATE_S), today.pop(LEARNER_UPDATE_S)  # wall times
    assert inside == today


def test_old_logprobs_come_before_the_update_only_for_a_kl_penalty_in_the_reward():
    kl_in_reward = ["algorithm.kl_coef=0.1", "algorithm.kl_in=reward"]
    assert old_logprobs_source(load_config(None, kl_in_reward)) == BEFORE_UPDATE
    assert old_logprobs_source(load_config(None, [*kl_in_reward, "training.ppo_epochs=2"])) == BEFORE_UPDATE
    assert old_logprobs_source(load_config(None, KL_LOSS)) == UPDATE_FORWARD
    assert old_logprobs_source(load_config(None, ["algorithm.kl_in=reward"])) == UPDATE_FORWARD  # no reference
