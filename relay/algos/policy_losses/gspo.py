"""GSPO (Zheng et al. 2025, "Group Sequence Policy Optimization"), token form (GSPO-token).

s_i = exp(mean over model tokens of log pi/pi_old): one length-normalized ratio per sequence,
clipped as a whole, since the reward is per sequence too; per-token ratios add noise that
clipping then amplifies. Per token, s_{i,t} = sg[s_i] * pi_t / sg[pi_t]: its value is s_i, its
gradient s_i * grad log pi_t, so with sequence-level advantages and the "seq-mean-token-mean"
aggregation it is exactly the paper's GSPO objective, and it also accepts token-level
advantages. The paper's clip ranges are ~1e-3 (3e-4 / 4e-4, configs/gspo.yaml), far below
PPO's 0.2, because a sequence ratio is an average.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from relay.algos.policy_losses.ppo import clip_range_problems

if TYPE_CHECKING:
    from relay.algos.losses import TokenLoss


@dataclass(frozen=True)
class Hyperparameters:
    clip_low: float = 0.2  # algorithm.clip_low: s_i is clipped below at 1 - clip_low (the paper: 3e-4)
    clip_high: float = 0.2  # algorithm.clip_high: and above at 1 + clip_high (the paper: 4e-4)

    def problems(self) -> dict[str, str]:
        return clip_range_problems(self.clip_low, self.clip_high)


def per_token_loss(hp: Hyperparameters, *, logprobs, old_logprobs, advantages, loss_mask) -> TokenLoss:
    import torch

    from relay.algos.losses import MAX_LOG_RATIO, TokenLoss, clipped_surrogate, log_ratio, on_tokens, sequence_mean

    log_r = log_ratio(logprobs, old_logprobs, loss_mask)
    seq_log_ratio = sequence_mean(log_r, loss_mask)  # [B,1]
    logp = on_tokens(loss_mask, logprobs)
    log_s = (logp - logp.detach() + seq_log_ratio.detach()).clamp(max=MAX_LOG_RATIO)  # [B,R]
    ratio = on_tokens(loss_mask, log_s.exp())
    pg1, pg2 = clipped_surrogate(on_tokens(loss_mask, advantages.detach()), ratio, hp.clip_low, hp.clip_high)
    return TokenLoss(torch.maximum(pg1, pg2), pg2 > pg1, ratio, log_r)
