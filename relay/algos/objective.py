"""The whole training objective, composed in one place: the learner's (policy loss, truncated-IS
weights, aggregation, KL penalty, entropy bonus) and the critic's (clipped value loss). The actors
compute logprobs, entropy and values and call these; the terms themselves are in
relay/algos/policy_losses/, losses.py and kl.py. All tensors [B,R] over response tokens.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any

import torch

from relay.algos.kl import kl_penalty
from relay.algos.losses import aggregate, on_tokens, truncated_is_weights, value_loss
from relay.algos.registry import POLICY_LOSSES
from relay.algos.utils import masked_mean


def policy_loss(
    name: str,
    *,
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    agg_mode: str = "token-mean",
    is_weights: torch.Tensor | None = None,
    **hyperparameters: Any,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The policy loss `name` (a module of relay/algos/policy_losses/) -> (scalar loss, metrics).

    `hyperparameters` by name (clip_low=..., tau_pos=...); those other losses take are ignored.
    Metrics: pg_clipfrac (share of model tokens where the loss's clipping is active), ppo_kl
    (mean of old - new logprob), ratio_mean, each loss's own (dual_clip: pg_clipfrac_lower), and
    is_weight_mean when is_weights is given.
    """
    bound = POLICY_LOSSES.from_keywords(name, hyperparameters)
    return _policy_term(POLICY_LOSSES[name], bound, logprobs, old_logprobs, advantages, loss_mask, agg_mode, is_weights)


def _policy_term(
    loss_module: types.ModuleType,
    hyperparameters: Any,
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    agg_mode: str,
    is_weights: torch.Tensor | None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Every policy loss alike: its per-token loss, times the IS weights, aggregated, and the metrics."""
    term = loss_module.per_token_loss(
        hyperparameters, logprobs=logprobs, old_logprobs=old_logprobs, advantages=advantages, loss_mask=loss_mask
    )
    per_token = term.loss
    if is_weights is not None:
        per_token = per_token * on_tokens(loss_mask, is_weights.detach())
    loss = aggregate(per_token, loss_mask, agg_mode)
    with torch.no_grad():
        metrics = {
            "pg_clipfrac": masked_mean(term.clipped.float(), loss_mask).item(),
            "ppo_kl": masked_mean(-term.log_ratio, loss_mask).item(),  # mean of old - new
            "ratio_mean": masked_mean(term.ratio, loss_mask).item(),
        }
        if is_weights is not None:
            metrics["is_weight_mean"] = masked_mean(is_weights, loss_mask).item()
        metrics.update(term.metrics or {})
    return loss, metrics


@dataclass(frozen=True)
class Objective:
    """The learner's loss on one micro-batch:

        loss = aggregate(policy_loss_t * is_weight_t)           algorithm.policy_loss, loss_agg, tis_cap
             + kl_coef * aggregate(KL_t(pi || ref))             with algorithm.kl_in=loss
             - entropy_coef * aggregate(entropy_t)              the entropy bonus (Mnih et al. 2016)

    Build it once from the config (`from_settings`); the Learner calls it per micro-batch.
    """

    policy_loss: str = "ppo"
    hyperparameters: Any = None  # the policy loss's Hyperparameters; None: its defaults
    loss_agg: str = "token-mean"
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    kl_in_loss: bool = True  # False: the KL penalty is in the reward (relay/update/batch.py), not here
    entropy_coef: float = 0.0
    tis_cap: float | None = None  # None or 0: no truncated-IS weights

    @classmethod
    def from_settings(cls, algorithm, tis_cap: float | None) -> Objective:
        """From the algorithm config section; `tis_cap` already resolved (relay/config/resolved.py)."""
        return cls(
            policy_loss=algorithm.policy_loss,
            hyperparameters=POLICY_LOSSES.bind(algorithm),
            loss_agg=algorithm.loss_agg,
            kl_coef=algorithm.kl_coef,
            kl_estimator=algorithm.kl_estimator,
            kl_in_loss=algorithm.kl_in == "loss",
            entropy_coef=algorithm.entropy_coef,
            tis_cap=tis_cap,
        )

    def __call__(
        self,
        *,
        logprobs: torch.Tensor,
        entropy: torch.Tensor,
        old_logprobs: torch.Tensor,
        rollout_logprobs: torch.Tensor,
        ref_logprobs: torch.Tensor | None,
        advantages: torch.Tensor,
        loss_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """(scalar loss, metrics: the policy loss's, pg_loss, kl_loss with a KL term, entropy, loss)."""
        module = POLICY_LOSSES.module(self.policy_loss)
        hyperparameters = self.hyperparameters if self.hyperparameters is not None else module.Hyperparameters()
        is_weights = truncated_is_weights(old_logprobs, rollout_logprobs, self.tis_cap) if self.tis_cap else None
        loss, metrics = _policy_term(
            module, hyperparameters, logprobs, old_logprobs, advantages, loss_mask, self.loss_agg, is_weights
        )
        metrics = {k: float(v) for k, v in metrics.items()}
        metrics["pg_loss"] = float(loss.detach())
        if self.kl_coef > 0 and self.kl_in_loss:
            kl = aggregate(kl_penalty(logprobs, ref_logprobs, self.kl_estimator), loss_mask, self.loss_agg)
            loss = loss + self.kl_coef * kl
            metrics["kl_loss"] = float(kl.detach())
        ent = aggregate(entropy, loss_mask, self.loss_agg)
        if self.entropy_coef:
            loss = loss - self.entropy_coef * ent
        metrics["entropy"] = float(ent.detach())
        metrics["loss"] = float(loss.detach())
        return loss, metrics


def critic_objective(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    loss_mask: torch.Tensor,
    clip_range: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The critic's loss on one micro-batch: the clipped value loss, token-mean (every token's value
    error weighs the same, whatever the policy's loss_agg), and its metrics with vf_loss."""
    loss, metrics = value_loss(values, old_values, returns, loss_mask, clip_range=clip_range, agg_mode="token-mean")
    return loss, {"vf_loss": float(loss.detach()), **{k: float(v) for k, v in metrics.items()}}
