"""REINFORCE++ (Hu 2025): the discounted reward-to-go of token_rewards plus the sequence reward on
the last model token, whitened over all model tokens of the batch.

Global normalization instead of a per-prompt one avoids overfitting to easy prompts and needs no
groups.
"""

from __future__ import annotations

from dataclasses import dataclass

from relay.algos.registry import EstimatorTraits

TRAITS = EstimatorTraits(token_level=True)


@dataclass(frozen=True)
class Hyperparameters:
    gamma: float = 1.0  # algorithm.gamma: the discount per model token
    eps: float = 1e-6  # added to the variance when whitening

    def problems(self) -> dict[str, str]:
        return discount_problems(self.gamma, self.eps)


def discount_problems(gamma: float, eps: float) -> dict[str, str]:
    """The checks of a discount and a whitening eps, shared with reinforce_plus_plus_baseline."""
    problems = {} if 0 <= gamma <= 1 else {"gamma": f"must be in [0, 1], got {gamma}"}
    if not eps > 0:
        problems["eps"] = f"must be > 0, got {eps}"
    return problems


def advantages(hp: Hyperparameters, *, rewards, loss_mask, group_ids, token_rewards=None, values=None, baseline=None):
    import torch

    from relay.algos.advantages import check_inputs, reward_to_go, token_level_rewards
    from relay.algos.utils import masked_whiten

    with torch.no_grad():
        check_inputs(rewards, loss_mask, group_ids)
        level = token_level_rewards(rewards, loss_mask, token_rewards)
        returns = reward_to_go(level, loss_mask, hp.gamma)
        return masked_whiten(returns, loss_mask, hp.eps), returns
