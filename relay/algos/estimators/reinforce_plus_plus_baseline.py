"""REINFORCE++-baseline (Hu 2025): subtract the group mean reward (or `baseline` [B] if given) from
the sequence reward, then proceed as REINFORCE++.

With gamma=1 and no token rewards this is (r_i - mean_group) broadcast and whitened over the
batch. `returns` are those of the raw rewards (no baseline).
"""

from __future__ import annotations

from dataclasses import dataclass

from relay.algos.estimators.reinforce_plus_plus import discount_problems
from relay.algos.registry import EstimatorTraits

TRAITS = EstimatorTraits(token_level=True)


@dataclass(frozen=True)
class Hyperparameters:
    gamma: float = 1.0  # algorithm.gamma: the discount per model token
    eps: float = 1e-6  # added to the variance when whitening

    def problems(self) -> dict[str, str]:
        return discount_problems(self.gamma, self.eps)


def advantages(hp: Hyperparameters, *, rewards, loss_mask, group_ids, token_rewards=None, values=None, baseline=None):
    import torch

    from relay.algos.advantages import check_inputs, group_stats, reward_to_go, token_level_rewards
    from relay.algos.utils import masked_whiten

    with torch.no_grad():
        check_inputs(rewards, loss_mask, group_ids)
        r = rewards.to(loss_mask.dtype)
        b = group_stats(r, group_ids)[0] if baseline is None else baseline.to(r.dtype)
        level = token_level_rewards(r - b, loss_mask, token_rewards)
        adv = masked_whiten(reward_to_go(level, loss_mask, hp.gamma), loss_mask, hp.eps)
        returns = reward_to_go(token_level_rewards(r, loss_mask, token_rewards), loss_mask, hp.gamma)
        return adv, returns
