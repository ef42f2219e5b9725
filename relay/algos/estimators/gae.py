"""Generalized advantage estimation (Schulman et al. 2016) over model tokens.

    delta_t = r_t + gamma * V_next - V_t,   A_t = delta_t + gamma * lam * A_next,

where "next" is the next model token (V_next = 0 after the last one) and r_t are the token-level
rewards (token_rewards + sequence reward on the last model token). returns = A + V, the critic's
regression target. Advantages are not whitened here.
"""

from __future__ import annotations

from dataclasses import dataclass

from relay.algos.registry import EstimatorTraits

TRAITS = EstimatorTraits(uses_values=True, token_level=True)


@dataclass(frozen=True)
class Hyperparameters:
    gamma: float = 1.0  # algorithm.gamma: the discount per model token
    lam: float = 1.0  # algorithm.lam: GAE's lambda, bias (0: one-step TD) against variance (1: Monte Carlo)

    def problems(self) -> dict[str, str]:
        pairs = (("gamma", self.gamma), ("lam", self.lam))
        return {k: f"must be in [0, 1], got {v}" for k, v in pairs if not 0 <= v <= 1}


def advantages(hp: Hyperparameters, *, rewards, loss_mask, group_ids, token_rewards=None, values=None, baseline=None):
    import torch

    from relay.algos.advantages import check_inputs, token_level_rewards

    with torch.no_grad():
        check_inputs(rewards, loss_mask, group_ids)
        if values is None:
            raise ValueError("gae needs values [B,R] from the critic")
        if values.shape != loss_mask.shape:
            raise ValueError(f"values must be [B,R]={tuple(loss_mask.shape)}, got {tuple(values.shape)}")
        model = loss_mask > 0
        level = token_level_rewards(rewards, loss_mask, token_rewards)
        v = torch.where(model, values.detach().to(level.dtype), torch.zeros_like(level))
        B, R = level.shape
        adv = torch.zeros_like(level)
        next_v = torch.zeros(B, dtype=level.dtype, device=level.device)
        next_a = torch.zeros(B, dtype=level.dtype, device=level.device)
        for t in reversed(range(R)):
            m = model[:, t]
            delta = level[:, t] + hp.gamma * next_v - v[:, t]
            a = delta + hp.gamma * hp.lam * next_a
            adv[:, t] = torch.where(m, a, torch.zeros_like(a))
            # Observation tokens leave the recursion state untouched: they are skipped, not zeros.
            next_a = torch.where(m, a, next_a)
            next_v = torch.where(m, v[:, t], next_v)
        returns = torch.where(model, adv + v, torch.zeros_like(adv))
        return adv, returns
