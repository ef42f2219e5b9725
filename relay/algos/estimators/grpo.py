"""GRPO (Shao et al. 2024, "DeepSeekMath"), outcome supervision:

    A_i = (r_i - mean_group) / (std_group + eps), broadcast over the model tokens of row i.

A singleton group has no baseline to compare with: its advantage is 0, not its raw reward.
"""

from __future__ import annotations

from dataclasses import dataclass

from relay.algos.registry import EstimatorTraits

TRAITS = EstimatorTraits(needs_groups=True)


@dataclass(frozen=True)
class Hyperparameters:
    eps: float = 1e-6  # added to the group's std, so a group of equal rewards divides 0 by eps, not by 0

    def problems(self) -> dict[str, str]:
        return {} if self.eps > 0 else {"eps": f"must be > 0, got {self.eps}"}


def advantages(hp: Hyperparameters, *, rewards, loss_mask, group_ids, token_rewards=None, values=None, baseline=None):
    import torch

    from relay.algos.advantages import broadcast_rows, check_inputs, group_stats

    with torch.no_grad():
        check_inputs(rewards, loss_mask, group_ids)
        r = rewards.to(loss_mask.dtype)
        mean, std, _ = group_stats(r, group_ids)
        adv = (r - mean) / (std + hp.eps)  # [B]
        return broadcast_rows(adv, loss_mask), broadcast_rows(r, loss_mask)
