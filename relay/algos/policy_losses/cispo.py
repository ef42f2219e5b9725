"""CISPO (MiniMax 2025, "MiniMax-M1: Scaling Test-Time Compute Efficiently with Lightning
Attention", eq. 4-5): clip the importance-sampling weight, not the update.

    loss_t = -sg(clip(r_t, 1 - eps_low_is, 1 + eps_high_is)) * A_t * log pi_t,   r_t = pi_t / pi_old_t

PPO's clip zeroes the gradient of a token whose ratio left the trust region; the rare, low-
probability tokens that open a reflection ("However", "Wait") leave it first and stop learning.
Here every token keeps its gradient, -w_t * A_t * grad log pi_t, only its weight w_t is capped.
The paper sets no lower bound (eps_low_is large) and tunes only eps_high_is; it normalizes by
the batch's token count, i.e. algorithm.loss_agg token-mean.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from relay.algos.losses import TokenLoss


@dataclass(frozen=True)
class Hyperparameters:
    # The weight is capped at 1 + eps_high_is: large, so it only binds on far off-policy tokens.
    eps_high_is: float = 5.0
    # The weight is floored at 1 - eps_low_is; null: no floor, as in the paper.
    eps_low_is: float | None = None

    def problems(self) -> dict[str, str]:
        problems = {}
        if not self.eps_high_is > 0:
            problems["eps_high_is"] = f"must be > 0, got {self.eps_high_is}"
        if self.eps_low_is is not None and not self.eps_low_is >= 0:
            problems["eps_low_is"] = f"must be >= 0 or null (no floor), got {self.eps_low_is}"
        return problems


def per_token_loss(hp: Hyperparameters, *, logprobs, old_logprobs, advantages, loss_mask) -> TokenLoss:
    from relay.algos.losses import TokenLoss, log_ratio, on_tokens

    log_r = log_ratio(logprobs, old_logprobs, loss_mask)
    ratio = log_r.exp()  # [B,R]
    low = None if hp.eps_low_is is None else 1.0 - hp.eps_low_is
    weight = ratio.clamp(min=low, max=1.0 + hp.eps_high_is).detach()
    loss = -weight * on_tokens(loss_mask, advantages.detach()) * on_tokens(loss_mask, logprobs)
    return TokenLoss(loss, weight != ratio.detach(), ratio, log_r)
