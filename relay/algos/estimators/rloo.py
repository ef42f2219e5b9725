"""RLOO (Ahmadian et al. 2024, "Back to Basics: Revisiting REINFORCE Style Optimization"; Kool et
al. 2019): A_i = r_i - mean_{j != i} r_j, the leave-one-out baseline.

The baseline does not depend on r_i, so the estimator stays unbiased. Equals n/(n-1) * (r_i - mean).
A singleton group: 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from relay.algos.registry import EstimatorTraits

TRAITS = EstimatorTraits(needs_groups=True)


@dataclass(frozen=True)
class Hyperparameters:
    def problems(self) -> dict[str, str]:
        return {}


def advantages(hp: Hyperparameters, *, rewards, loss_mask, group_ids, token_rewards=None, values=None, baseline=None):
    import torch

    from relay.algos.advantages import broadcast_rows, check_inputs, group_stats

    with torch.no_grad():
        check_inputs(rewards, loss_mask, group_ids)
        r = rewards.to(loss_mask.dtype)
        mean, _, n = group_stats(r, group_ids)
        loo = (mean * n - r) / (n - 1).clamp(min=1)  # [B] mean of the others
        adv = torch.where(n > 1, r - loo, torch.zeros_like(r))
        return broadcast_rows(adv, loss_mask), broadcast_rows(r, loss_mask)
