"""PPO's clipped surrogate (Schulman et al. 2017, "Proximal Policy Optimization Algorithms"): per
token max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high)), r = pi / pi_old.

Separate low/high bounds are DAPO's clip-higher (Yu et al. 2025): a larger clip_high lets
low-probability tokens grow, which keeps entropy from collapsing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from relay.algos.losses import TokenLoss


def clip_range_problems(clip_low: float, clip_high: float) -> dict[str, str]:
    """The checks of the clip range [1 - clip_low, 1 + clip_high], for every loss that clips r so."""
    problems = {}
    if not 0 <= clip_low < 1:
        problems["clip_low"] = f"must be in [0, 1), got {clip_low}"
    if not clip_high >= 0:
        problems["clip_high"] = f"must be >= 0, got {clip_high}"
    return problems


@dataclass(frozen=True)
class Hyperparameters:
    clip_low: float = 0.2  # algorithm.clip_low: r is clipped below at 1 - clip_low
    clip_high: float = 0.2  # algorithm.clip_high: and above at 1 + clip_high (> clip_low: clip-higher)

    def problems(self) -> dict[str, str]:
        return clip_range_problems(self.clip_low, self.clip_high)


def per_token_loss(hp: Hyperparameters, *, logprobs, old_logprobs, advantages, loss_mask) -> TokenLoss:
    import torch

    from relay.algos.losses import TokenLoss, clipped_surrogate, log_ratio, on_tokens

    log_r = log_ratio(logprobs, old_logprobs, loss_mask)
    ratio = log_r.exp()  # [B,R]
    pg1, pg2 = clipped_surrogate(on_tokens(loss_mask, advantages.detach()), ratio, hp.clip_low, hp.clip_high)
    return TokenLoss(torch.maximum(pg1, pg2), pg2 > pg1, ratio, log_r)
