"""Dual-clip PPO (Ye et al. 2020, "Mastering Complex Control in MOBA Games with Deep RL").

For A < 0 the clipped surrogate -A * r grows without bound in r: a token whose ratio exploded
(stale or off-policy data) would dominate the batch. The loss is further capped at -A * c
there, which also zeroes that token's gradient. Elsewhere it is PPO's clipped surrogate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from relay.algos.policy_losses.ppo import clip_range_problems

if TYPE_CHECKING:
    from relay.algos.losses import TokenLoss


@dataclass(frozen=True)
class Hyperparameters:
    clip_low: float = 0.2  # algorithm.clip_low, as in ppo
    clip_high: float = 0.2  # algorithm.clip_high, as in ppo
    dual_clip_c: float = 3.0  # algorithm.dual_clip_c: for A < 0 the loss is at most -A * dual_clip_c

    def problems(self) -> dict[str, str]:
        problems = clip_range_problems(self.clip_low, self.clip_high)
        if not self.dual_clip_c > 1:
            problems["dual_clip_c"] = f"must be > 1, got {self.dual_clip_c}"
        return problems


def per_token_loss(hp: Hyperparameters, *, logprobs, old_logprobs, advantages, loss_mask) -> TokenLoss:
    import torch

    from relay.algos.losses import TokenLoss, clipped_surrogate, log_ratio, on_tokens
    from relay.algos.utils import masked_mean

    log_r = log_ratio(logprobs, old_logprobs, loss_mask)
    ratio = log_r.exp()
    adv = on_tokens(loss_mask, advantages.detach())
    pg1, pg2 = clipped_surrogate(adv, ratio, hp.clip_low, hp.clip_high)
    clipped = torch.maximum(pg1, pg2)
    pg3 = -adv * hp.dual_clip_c
    lower = (adv < 0) & (pg3 < clipped)
    loss = torch.where(adv < 0, torch.minimum(clipped, pg3), clipped)
    with torch.no_grad():
        metrics = {"pg_clipfrac_lower": masked_mean(lower.float(), loss_mask).item()}
    return TokenLoss(loss, pg2 > pg1, ratio, log_r, metrics)
