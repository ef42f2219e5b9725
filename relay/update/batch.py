"""A step's Batch, built where it is trained: from the step's samples, inside the actor's call.

The driver ships the samples (plain Python) once; the learner, and with PPO the critic, build the
padded Batch, the rewards the estimator wants, the KL penalty in the reward and the advantages
here, each from the same samples with the same functions in the same order, so every actor holds
the same numbers. The driver then never builds or unpickles a tensor (it needs no torch), and the
Batch crosses no process boundary. The reference and the critic's value pass build the Batch from
the same samples (`as_batch`); what they return (reference logprobs, values, with a KL penalty in
the reward the learner's old logprobs) reaches `prepare_batch` as an argument of the update call.
"""

from __future__ import annotations

import torch

from relay.algos.advantages import estimate_advantages
from relay.algos.kl import kl_penalty
from relay.algos.registry import ESTIMATORS
from relay.algos.utils import masked_mean
from relay.config import AlgorithmConfig
from relay.run.metric_keys import KL_MEAN, REWARD_MEAN, REWARD_STD
from relay.types import Batch, Sample

PAD_ID = 0  # padding is masked out; any valid id works


def as_batch(step: list[Sample] | Batch) -> Batch:
    """The rollout's tensors of a step's samples; a Batch (built by a caller) passes through."""
    return Batch.from_samples(step, pad_id=PAD_ID) if isinstance(step, list) else step


def batch_metrics(batch: Batch) -> dict[str, float]:
    """What the driver reports of a step's batch."""
    return {
        REWARD_MEAN: batch.rewards.mean().item(),
        REWARD_STD: batch.rewards.std(correction=0).item(),
        "response/length_mean": batch.loss_mask.sum(1).mean().item(),
    }


def prepare_batch(
    samples: list[Sample],
    algorithm: AlgorithmConfig,
    *,
    old_logprobs: torch.Tensor | None = None,
    ref_logprobs: torch.Tensor | None = None,
    values: torch.Tensor | None = None,
    kl_coef: float = 0.0,
) -> tuple[Batch, dict[str, float]]:
    """The Batch an update trains on, and the step's batch metrics (with a KL penalty in the
    reward, its mean as kl/mean). `kl_coef`: the driver's KL controller's value this step.

    A KL penalty in the reward (algorithm.kl_in=reward, with reference logprobs) needs the
    learner's old logprobs of the batch, computed before the update (relay/update/old_logprobs.py)."""
    a = algorithm
    batch = Batch.from_samples(samples, pad_id=PAD_ID)
    # Sample.reward is the episode's whole return; token_rewards say where parts of it were earned.
    # Token-level estimators add token_rewards themselves, so they get only the rest as final reward.
    final_rewards = (
        batch.rewards - batch.token_rewards.sum(1) if ESTIMATORS[a.estimator].TRAITS.token_level else batch.rewards
    )
    batch.old_logprobs, batch.ref_logprobs, batch.values = old_logprobs, ref_logprobs, values
    metrics = batch_metrics(batch)
    if a.kl_in == "reward" and ref_logprobs is not None:  # per-token penalty in the reward (InstructGPT-style)
        if old_logprobs is None:
            raise ValueError("a KL penalty in the reward needs the learner's old logprobs of the batch")
        kl = kl_penalty(old_logprobs, ref_logprobs, a.kl_estimator)
        metrics[KL_MEAN] = masked_mean(kl, batch.loss_mask).item()
        batch.token_rewards -= kl_coef * kl * batch.loss_mask
    batch.advantages, batch.returns = estimate_advantages(
        a,
        rewards=final_rewards,
        loss_mask=batch.loss_mask,
        group_ids=batch.group_ids,
        token_rewards=batch.token_rewards,
        values=batch.values,
        responses=batch.responses,
    )
    return batch, metrics
