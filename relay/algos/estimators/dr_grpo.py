"""Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training"): A_i = r_i - mean_group.

Dividing by the group std up-weights questions that are too easy or too hard (small std), a
difficulty bias; dropping it keeps the policy gradient unbiased. Pair it with the
"seq-mean-token-sum-norm" aggregation to also remove the length bias.
"""

from __future__ import annotations

from dataclasses import dataclass

from relay.algos.registry import EstimatorTraits

TRAITS = EstimatorTraits()


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
        mean, _, _ = group_stats(r, group_ids)
        return broadcast_rows(r - mean, loss_mask), broadcast_rows(r, loss_mask)
