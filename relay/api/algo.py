"""The PPO math under the argument names other PPO code uses (`from relay import algo`).

Each function is a thin name over relay.algos, which the learner trains with: one implementation.
Shapes: (batch, seq_len) over response tokens; response_mask is 1 on the tokens the model wrote.

    advantages, returns = algo.compute_gae_advantage_return(token_level_rewards, values, response_mask, gamma, lam)
    advantages, returns = algo.compute_grpo_advantage(token_level_rewards, response_mask, index)
    policy_loss, metrics = algo.compute_policy_loss(old_log_probs, log_probs, advantages, response_mask, clip_ratio)
    value_loss, metrics = algo.compute_value_loss(vpreds, returns, old_values, response_mask, cliprange_value)
    penalized_rewards, kl_value = algo.apply_kl_penalty(token_level_rewards, log_probs, ref_log_probs, response_mask, kl_coef)
    kl_ctrl = algo.KLController(init_kl_coef=0.01, target_kl=0.01, adaptive=True); kl_ctrl.update(current_kl, n_steps)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from relay.algos.advantages import compute_advantages
from relay.algos.kl import kl_penalty
from relay.algos.losses import value_loss
from relay.algos.objective import policy_loss
from relay.algos.utils import masked_mean
from relay.update.kl_control import AdaptiveKLController, FixedKLController

__all__ = [
    "KLController",
    "apply_kl_penalty",
    "compute_gae_advantage_return",
    "compute_grpo_advantage",
    "compute_policy_loss",
    "compute_value_loss",
]


def _mask(response_mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return response_mask.to(like.dtype if like.is_floating_point() else torch.float32)


def group_ids(index: Sequence[Any] | torch.Tensor) -> torch.Tensor:
    """Any labels (prompt ids, strings, a numpy array) -> [B] integer group ids, equal labels equal ids."""
    labels = index.tolist() if hasattr(index, "tolist") else list(index)
    ids: dict[Any, int] = {}
    return torch.tensor([ids.setdefault(label, len(ids)) for label in labels], dtype=torch.long)


def compute_gae_advantage_return(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE (Schulman et al. 2016) over the response tokens -> (advantages, returns), both (batch, seq_len).
    relay's `gae` estimator (relay/algos/estimators/gae.py), the rewards given per token."""
    mask = _mask(response_mask, token_level_rewards)
    batch = mask.shape[0]
    return compute_advantages(
        "gae",
        rewards=torch.zeros(batch, dtype=mask.dtype),
        token_rewards=token_level_rewards.to(mask.dtype),
        values=values.to(mask.dtype),
        loss_mask=mask,
        group_ids=torch.arange(batch),
        gamma=gamma,
        lam=lam,
    )


def compute_grpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any] | torch.Tensor,
    epsilon: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO (Shao et al. 2024): each response's total reward against its group's (same `index`)
    mean and std -> (advantages, returns), both (batch, seq_len). relay's `grpo` estimator."""
    mask = _mask(response_mask, token_level_rewards)
    rewards = (token_level_rewards.to(mask.dtype) * mask).sum(dim=-1)  # [B] the response's total reward
    return compute_advantages("grpo", rewards=rewards, loss_mask=mask, group_ids=group_ids(index), eps=epsilon)


def compute_policy_loss(
    old_log_probs: torch.Tensor,
    log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_ratio: float = 0.2,
    clip_ratio_high: float | None = None,
    loss_agg_mode: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's clipped surrogate -> (scalar loss, metrics: pg_clipfrac, ppo_kl, ratio_mean). relay's `ppo` loss."""
    return policy_loss(
        "ppo",
        logprobs=log_probs,
        old_logprobs=old_log_probs,
        advantages=advantages,
        loss_mask=_mask(response_mask, log_probs),
        agg_mode=loss_agg_mode,
        clip_low=clip_ratio,
        clip_high=clip_ratio if clip_ratio_high is None else clip_ratio_high,
    )


def compute_value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    old_values: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_value: float = 0.2,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The clipped value loss 0.5 max((v - R)^2, (v_clip - R)^2) -> (scalar loss, metrics: vf_clipfrac, vpred_mean)."""
    return value_loss(vpreds, old_values, returns, _mask(response_mask, vpreds), clip_range=cliprange_value)


def apply_kl_penalty(
    token_level_rewards: torch.Tensor,
    log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    kl_coef: float = 0.01,
    kl_penalty_type: str = "k1",
) -> tuple[torch.Tensor, float]:
    """Rewards minus kl_coef x the per-token KL estimate (k1, k2 or k3) on response tokens ->
    (penalized rewards (batch, seq_len), the mean KL over response tokens)."""
    mask = _mask(response_mask, token_level_rewards)
    kl = kl_penalty(log_probs.detach(), ref_log_probs.detach(), kl_penalty_type) * mask
    return token_level_rewards - kl_coef * kl, float(masked_mean(kl, mask))


class KLController:
    """The KL coefficient: fixed, or adaptive (Ziegler et al. 2019) towards target_kl over horizon samples.
    relay.update.kl_control's controllers; `value` (also `kl_coef`) is the current coefficient."""

    def __init__(
        self, init_kl_coef: float = 0.01, target_kl: float = 0.01, adaptive: bool = False, horizon: int = 10_000
    ):
        self._controller = (
            AdaptiveKLController(init_kl_coef, target_kl, horizon) if adaptive else FixedKLController(init_kl_coef)
        )

    def update(self, current_kl: float, n_steps: int) -> float:
        self._controller.update(current_kl, n_steps)
        return self.value

    @property
    def value(self) -> float:
        return self._controller.value

    kl_coef = value

    def state_dict(self) -> dict:
        return self._controller.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self._controller.load_state_dict(state)
