"""Advantage estimators: pure functions of tensors, one dict of them.

Every estimator has the same keyword-only signature so the driver can call any of them by
config name:

    fn(*, rewards [B], loss_mask [B,R], group_ids [B], token_rewards [B,R] | None,
       values [B,R] | None, gamma, lam, eps, baseline [B] | None) -> (advantages [B,R], returns [B,R])

Arguments an estimator does not use are ignored. Both outputs are 0 wherever loss_mask == 0.

`returns` is the reward-to-go of the real rewards at each model token, without baseline or
normalization (GAE: advantages + values, the critic's target). Group estimators (grpo,
dr_grpo, rloo) use only the sequence reward, so their returns are that reward broadcast.

Multi-turn episodes interleave model tokens (loss_mask 1) with observation tokens (loss_mask
0). Token-level estimators run their recursions over model tokens only, as if observations
were absent: an observation is not an action, so it neither gets credit nor costs a discount
step. A token reward that sits on an observation token is credited to the model token just
before it (the action that caused it); one before the first model token credits no action
and is dropped.
"""

from __future__ import annotations

from typing import Protocol

import torch

from relay.algos.utils import masked_whiten


class AdvantageEstimator(Protocol):
    def __call__(
        self,
        *,
        rewards: torch.Tensor,
        loss_mask: torch.Tensor,
        group_ids: torch.Tensor,
        token_rewards: torch.Tensor | None = None,
        values: torch.Tensor | None = None,
        gamma: float = 1.0,
        lam: float = 1.0,
        eps: float = 1e-6,
        baseline: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


# ---------------------------------------------------------------------------------------------
# helpers


def _check(rewards: torch.Tensor, loss_mask: torch.Tensor, group_ids: torch.Tensor) -> None:
    if loss_mask.dim() != 2:
        raise ValueError(f"loss_mask must be [B,R], got shape {tuple(loss_mask.shape)}")
    B = loss_mask.shape[0]
    if rewards.shape != (B,):
        raise ValueError(f"rewards must be [B]={B}, got shape {tuple(rewards.shape)}")
    if group_ids.shape != (B,):
        raise ValueError(f"group_ids must be [B]={B}, got shape {tuple(group_ids.shape)}")


def _group_stats(rewards: torch.Tensor, group_ids: torch.Tensor):
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


def _broadcast(per_row: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """[B] -> [B,R], on model tokens only."""
    return torch.where(loss_mask > 0, per_row[:, None].expand_as(loss_mask), torch.zeros_like(loss_mask))


def _token_level_rewards(
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


def _reward_to_go(level: torch.Tensor, loss_mask: torch.Tensor, gamma: float) -> torch.Tensor:
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
# estimators


@torch.no_grad()
def grpo(*, rewards, loss_mask, group_ids, eps=1e-6, **_unused):
    """A_i = (r_i - mean_group) / (std_group + eps), broadcast over the model tokens of row i.

    GRPO, Shao et al. 2024 (DeepSeekMath), outcome supervision. A singleton group has no
    baseline to compare with: its advantage is 0, not its raw reward.
    """
    _check(rewards, loss_mask, group_ids)
    r = rewards.to(loss_mask.dtype)
    mean, std, _ = _group_stats(r, group_ids)
    adv = (r - mean) / (std + eps)  # [B]
    return _broadcast(adv, loss_mask), _broadcast(r, loss_mask)


@torch.no_grad()
def dr_grpo(*, rewards, loss_mask, group_ids, **_unused):
    """A_i = r_i - mean_group. Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training"):
    dividing by the group std up-weights questions that are too easy or too hard (small std),
    a difficulty bias; dropping it keeps the policy gradient unbiased. Pair it with the
    "seq-mean-token-sum-norm" aggregation to also remove the length bias."""
    _check(rewards, loss_mask, group_ids)
    r = rewards.to(loss_mask.dtype)
    mean, _, _ = _group_stats(r, group_ids)
    return _broadcast(r - mean, loss_mask), _broadcast(r, loss_mask)


@torch.no_grad()
def rloo(*, rewards, loss_mask, group_ids, **_unused):
    """A_i = r_i - mean_{j != i} r_j: the leave-one-out baseline (Ahmadian et al. 2024, "Back to
    Basics: Revisiting REINFORCE Style Optimization"; Kool et al. 2019). The baseline does not
    depend on r_i, so the estimator stays unbiased. Equals n/(n-1) * (r_i - mean). Singleton: 0."""
    _check(rewards, loss_mask, group_ids)
    r = rewards.to(loss_mask.dtype)
    mean, _, n = _group_stats(r, group_ids)
    loo = (mean * n - r) / (n - 1).clamp(min=1)  # [B] mean of the others
    adv = torch.where(n > 1, r - loo, torch.zeros_like(r))
    return _broadcast(adv, loss_mask), _broadcast(r, loss_mask)


@torch.no_grad()
def reinforce_plus_plus(*, rewards, loss_mask, group_ids, token_rewards=None, gamma=1.0, eps=1e-6, **_unused):
    """REINFORCE++ (Hu 2025): the discounted reward-to-go of token_rewards plus the sequence
    reward on the last model token, whitened over all model tokens of the batch. Global
    normalization instead of a per-prompt one avoids overfitting to easy prompts and needs no
    groups."""
    _check(rewards, loss_mask, group_ids)
    level = _token_level_rewards(rewards, loss_mask, token_rewards)
    returns = _reward_to_go(level, loss_mask, gamma)
    return masked_whiten(returns, loss_mask, eps), returns


@torch.no_grad()
def reinforce_plus_plus_baseline(
    *, rewards, loss_mask, group_ids, token_rewards=None, gamma=1.0, eps=1e-6, baseline=None, **_unused
):
    """REINFORCE++-baseline (Hu 2025): subtract the group mean reward (or `baseline` [B] if
    given) from the sequence reward, then proceed as REINFORCE++. With gamma=1 and no token
    rewards this is (r_i - mean_group) broadcast and whitened over the batch.
    `returns` are those of the raw rewards (no baseline)."""
    _check(rewards, loss_mask, group_ids)
    r = rewards.to(loss_mask.dtype)
    if baseline is None:
        b, _, _ = _group_stats(r, group_ids)
    else:
        b = baseline.to(r.dtype)
    level = _token_level_rewards(r - b, loss_mask, token_rewards)
    adv = masked_whiten(_reward_to_go(level, loss_mask, gamma), loss_mask, eps)
    returns = _reward_to_go(_token_level_rewards(r, loss_mask, token_rewards), loss_mask, gamma)
    return adv, returns


@torch.no_grad()
def gae(*, rewards, loss_mask, group_ids, token_rewards=None, values=None, gamma=1.0, lam=1.0, **_unused):
    """Generalized advantage estimation (Schulman et al. 2016) over model tokens.

    delta_t = r_t + gamma * V_next - V_t,   A_t = delta_t + gamma * lam * A_next,
    where "next" is the next model token (V_next = 0 after the last one) and r_t are the
    token-level rewards (token_rewards + sequence reward on the last model token).
    returns = A + V, the critic's regression target. Advantages are not whitened here: call
    masked_whiten(advantages, loss_mask) in the driver if the recipe wants it.
    """
    _check(rewards, loss_mask, group_ids)
    if values is None:
        raise ValueError("gae needs values [B,R] from the critic")
    if values.shape != loss_mask.shape:
        raise ValueError(f"values must be [B,R]={tuple(loss_mask.shape)}, got {tuple(values.shape)}")
    model = loss_mask > 0
    level = _token_level_rewards(rewards, loss_mask, token_rewards)
    v = torch.where(model, values.detach().to(level.dtype), torch.zeros_like(level))
    B, R = level.shape
    adv = torch.zeros_like(level)
    next_v = torch.zeros(B, dtype=level.dtype, device=level.device)
    next_a = torch.zeros(B, dtype=level.dtype, device=level.device)
    for t in reversed(range(R)):
        m = model[:, t]
        delta = level[:, t] + gamma * next_v - v[:, t]
        a = delta + gamma * lam * next_a
        adv[:, t] = torch.where(m, a, torch.zeros_like(a))
        # Observation tokens leave the recursion state untouched: they are skipped, not zeros.
        next_a = torch.where(m, a, next_a)
        next_v = torch.where(m, v[:, t], next_v)
    returns = torch.where(model, adv + v, torch.zeros_like(adv))
    return adv, returns


ESTIMATORS: dict[str, AdvantageEstimator] = {
    "grpo": grpo,
    "dr_grpo": dr_grpo,
    "rloo": rloo,
    "reinforce_plus_plus": reinforce_plus_plus,
    "reinforce_plus_plus_baseline": reinforce_plus_plus_baseline,
    "gae": gae,
}


def compute_advantages(name: str, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """ESTIMATORS[name](**kwargs) -> (advantages [B,R], returns [B,R])."""
    try:
        fn = ESTIMATORS[name]
    except KeyError:
        raise ValueError(f"unknown advantage estimator {name!r}; choose one of {sorted(ESTIMATORS)}") from None
    return fn(**kwargs)


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
