"""GMPO (Zhao et al. 2025, "Geometric-Mean Policy Optimization"): maximize the geometric mean of
a sequence's token ratios, clipped token by token in log space.

    loss_i = -A_i * exp( (1/|o_i|) * sum_t sign(A_t) * min(sign(A_t) * log r_t, sign(A_t) * clip(log r_t, -log_clip_low, log_clip_high)) )

GRPO's arithmetic mean of token ratios lets one outlier token's ratio swing the whole sequence's
update; a geometric mean damps it, so a wider clip range (the paper's e^-0.4 .. e^0.4) stays
stable. The min is PPO's pessimism, in log space: a clipped log ratio counts only where it lowers
the objective, and that token's gradient is then 0. A_i is the mean advantage over the
sequence's model tokens (as the official code, for sequence-level advantages).

Every model token of sequence i carries loss_i: with algorithm.loss_agg seq-mean-token-mean (the
paper's mean over sequences) the objective is the paper's; token-mean weighs sequences by length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from relay.algos.losses import TokenLoss


@dataclass(frozen=True)
class Hyperparameters:
    log_clip_low: float = 0.4  # log r is clipped below at -log_clip_low (the paper: r >= e^-0.4)
    log_clip_high: float = 0.4  # and above at log_clip_high (the paper: r <= e^0.4)

    def problems(self) -> dict[str, str]:
        pairs = (("log_clip_low", self.log_clip_low), ("log_clip_high", self.log_clip_high))
        return {k: f"must be > 0, got {v}" for k, v in pairs if not v > 0}


def per_token_loss(hp: Hyperparameters, *, logprobs, old_logprobs, advantages, loss_mask) -> TokenLoss:
    import torch

    from relay.algos.losses import TokenLoss, log_ratio, on_tokens, sequence_mean

    log_r = log_ratio(logprobs, old_logprobs, loss_mask)  # [B,R]
    adv = on_tokens(loss_mask, advantages.detach())
    sign = adv.sign()
    clipped_log_r = log_r.clamp(-hp.log_clip_low, hp.log_clip_high)
    pessimistic = sign * torch.minimum(sign * log_r, sign * clipped_log_r)  # [B,R]
    seq_ratio = sequence_mean(pessimistic, loss_mask).exp()  # [B,1] the clipped geometric mean
    seq_loss = -sequence_mean(adv, loss_mask) * seq_ratio  # [B,1]
    loss = on_tokens(loss_mask, seq_loss.expand_as(log_r))
    ratio = on_tokens(loss_mask, seq_ratio.detach().expand_as(log_r))
    return TokenLoss(loss, sign * clipped_log_r < sign * log_r, ratio, log_r)
