"""Advantages: the pieces estimators share, the call by name, and DAPO's sample-level steps.
The estimators themselves are relay/algos/estimators/ (that package's docstring: their contract).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from relay.algos.registry import ESTIMATORS


def compute_advantages(name: str, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """Estimator `name` -> (advantages [B,R], returns [B,R]). kwargs: its inputs (rewards, loss_mask,
    group_ids, token_rewards, values, baseline) and hyperparameters by name (gamma=..., eps=...);
    hyperparameters only other estimators take are ignored."""
    module = ESTIMATORS.module(name)
    names = ESTIMATORS.hyperparameter_names()
    hyperparameters = ESTIMATORS.from_keywords(name, {k: v for k, v in kwargs.items() if k in names})
    return module.advantages(hyperparameters, **taken(module, {k: v for k, v in kwargs.items() if k not in names}))


def estimate_advantages(algorithm: Any, **inputs) -> tuple[torch.Tensor, torch.Tensor]:
    """The configured estimator (algorithm.estimator, its hyperparameters bound from the algorithm
    config section: relay/algos/registry.py) on `inputs` -> (advantages [B,R], returns [B,R])."""
    module = ESTIMATORS.module(algorithm.estimator)
    return module.advantages(ESTIMATORS.bind(algorithm), **taken(module, inputs))


def taken(module: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    """The inputs an estimator's `advantages` names: a batch offers every input (the response
    tokens among them), and each estimator takes the ones its math reads."""
    params = inspect.signature(module.advantages).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return inputs
    return {k: v for k, v in inputs.items() if k in params}


# ---------------------------------------------------------------------------------------------
# the estimators' shared pieces


def check_inputs(rewards: torch.Tensor, loss_mask: torch.Tensor, group_ids: torch.Tensor) -> None:
    if loss_mask.dim() != 2:
        raise ValueError(f"loss_mask must be [B,R], got shape {tuple(loss_mask.shape)}")
    B = loss_mask.shape[0]
    if rewards.shape != (B,):
        raise ValueError(f"rewards must be [B]={B}, got shape {tuple(rewards.shape)}")
    if group_ids.shape != (B,):
        raise ValueError(f"group_ids must be [B]={B}, got shape {tuple(group_ids.shape)}")


def group_stats(rewards: torch.Tensor, group_ids: torch.Tensor):
    """Per-row group statistics: (mean [B], unbiased std [B], group size [B])."""
    _, inv = torch.unique(group_ids, return_inverse=True)  # [B] dense group index
    G = int(inv.max()) + 1 if inv.numel() else 0
    count = torch.zeros(G, dtype=rewards.dtype, device=rewards.device).index_add_(0, inv, torch.ones_like(rewards))
    total = torch.zeros(G, dtype=rewards.dtype, device=rewards.device).index_add_(0, inv, rewards)
    mean = (total / count)[inv]  # [B]
    sq = torch.zeros(G, dtype=rewards.dtype, device=rewards.device).index_add_(0, inv, (rewards - mean) ** 2)
    # Bessel-corrected, as torch.std by default. A singleton's deviation is 0, so the
    # clamp only keeps 0/0 away.
    std = (sq / (count - 1).clamp(min=1)).sqrt()[inv]  # [B]
    return mean, std, count[inv]


def broadcast_rows(per_row: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """[B] -> [B,R], on model tokens only."""
    return torch.where(loss_mask > 0, per_row[:, None].expand_as(loss_mask), torch.zeros_like(loss_mask))


def token_level_rewards(
    rewards: torch.Tensor, loss_mask: torch.Tensor, token_rewards: torch.Tensor | None
) -> torch.Tensor:
    """[B,R] rewards living on model tokens only: token_rewards (observation-token ones moved to
    the preceding model token) plus the sequence reward on the last model token."""
    B, R = loss_mask.shape
    model = loss_mask > 0
    pos = torch.arange(R, device=loss_mask.device).expand(B, R)
    # Index of the latest model token at or before t; -1 before the first one.
    prev = torch.where(model, pos, torch.full_like(pos, -1)).cummax(dim=1).values  # [B,R]
    level = torch.zeros_like(loss_mask)
    if token_rewards is not None:
        tr = torch.where(prev >= 0, token_rewards.to(level.dtype), torch.zeros_like(level))
        level.scatter_add_(1, prev.clamp(min=0), tr)
    has_model = model.any(dim=1)  # [B]
    last = prev[:, -1].clamp(min=0)  # [B] last model token
    final = torch.where(has_model, rewards.to(level.dtype), torch.zeros_like(rewards, dtype=level.dtype))
    level.scatter_add_(1, last[:, None], final[:, None])
    return level


def reward_to_go(level: torch.Tensor, loss_mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """G_t = r_t + gamma * G_next over model tokens (next = the next model token). [B,R]."""
    model = loss_mask > 0
    if gamma == 1.0:
        # Rewards are already 0 off model tokens, so a reverse cumsum skips observations for free.
        rtg = level.flip(1).cumsum(1).flip(1)
        return torch.where(model, rtg, torch.zeros_like(rtg))
    B, R = level.shape
    out = torch.zeros_like(level)
    running = torch.zeros(B, dtype=level.dtype, device=level.device)
    for t in reversed(range(R)):
        g = level[:, t] + gamma * running
        running = torch.where(model[:, t], g, running)  # observation tokens pass it through
        out[:, t] = torch.where(model[:, t], g, torch.zeros_like(g))
    return out


# ---------------------------------------------------------------------------------------------
# DAPO helpers (Yu et al. 2025, "DAPO: An Open-Source LLM Reinforcement Learning System at Scale")


@torch.no_grad()
def mixed_group_mask(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """[B] bool: True for rows whose group's rewards are not all equal.

    Dynamic sampling keeps only these: a group that is all right or all wrong has zero
    group-relative advantage everywhere, so it adds no gradient, only shrinks the batch.
    """
    _, inv = torch.unique(group_ids, return_inverse=True)
    G = int(inv.max()) + 1 if inv.numel() else 0
    r = rewards.float()
    hi = torch.full((G,), float("-inf"), device=r.device).scatter_reduce(0, inv, r, "amax")
    lo = torch.full((G,), float("inf"), device=r.device).scatter_reduce(0, inv, r, "amin")
    return (hi > lo)[inv]


def overlong_penalty(
    response_lengths: torch.Tensor, max_len: int, buffer_len: int, penalty_factor: float = 1.0
) -> torch.Tensor:
    """[B] soft overlong punishment (DAPO eq. 13), added to the reward.

    0 for length <= max_len - buffer_len, then linear down to -penalty_factor at max_len, and
    -penalty_factor beyond. The ramp tells the model *how* far over it is, instead of the
    noisy all-or-nothing signal of truncated samples.
    """
    if buffer_len < 0 or buffer_len > max_len:
        raise ValueError(f"need 0 <= buffer_len <= max_len, got buffer_len={buffer_len}, max_len={max_len}")
    lengths = torch.as_tensor(response_lengths, dtype=torch.float32)
    start = max_len - buffer_len
    if buffer_len == 0:
        frac = (lengths > max_len).float()
    else:
        frac = ((lengths - start) / buffer_len).clamp(min=0.0, max=1.0)
    return -penalty_factor * frac
