"""The pieces policy losses share, loss aggregation, the value loss, entropy, truncated
importance sampling. The policy losses themselves are relay/algos/policy_losses/; the objective
that puts the pieces together is relay/algos/objective.py.

Inputs are [B,R] over response tokens; loss_mask is 1 on model tokens and 0 on padding and
observation tokens. Values under mask 0 never reach the loss or the gradients: every function
selects with torch.where before any exp or product (0 * inf = NaN, see relay.algos.utils).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from relay.algos.registry import AGG_MODES
from relay.algos.utils import masked_mean, masked_sum

# exp(20) ~ 5e8: large enough never to bind for a sane policy, small enough to stay finite.
MAX_LOG_RATIO = 20.0


class TokenLoss(NamedTuple):
    """What a policy loss computes; relay/algos/objective.py weights, aggregates and reports it."""

    loss: torch.Tensor  # [B,R] per-token loss
    clipped: torch.Tensor  # [B,R] bool: where the loss's clipping is active (pg_clipfrac)
    ratio: torch.Tensor  # [B,R] the importance ratio the loss uses (ratio_mean)
    log_ratio: torch.Tensor  # [B,R] per-token log pi/pi_old (ppo_kl)
    metrics: dict[str, float] | None = None  # the loss's own, e.g. dual_clip's pg_clipfrac_lower


def on_tokens(mask: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """x on model tokens, 0 elsewhere (whatever x held there)."""
    return torch.where(mask > 0, x, torch.zeros_like(x))


def log_ratio(logprobs: torch.Tensor, old_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B,R] log pi/pi_old on model tokens (0 elsewhere), clamped so exp stays finite."""
    return on_tokens(mask, logprobs - old_logprobs).clamp(min=-MAX_LOG_RATIO, max=MAX_LOG_RATIO)


def clipped_surrogate(
    advantages: torch.Tensor, ratio: torch.Tensor, clip_low: float, clip_high: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's two candidate losses [B,R]: -A r and -A clip(r, 1 - clip_low, 1 + clip_high)."""
    return -advantages * ratio, -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)


def sequence_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B,R] -> [B,1] mean of x over each row's model tokens (an empty row: 0)."""
    n_tok = mask.sum(-1, keepdim=True).clamp(min=1.0)
    return masked_sum(x, mask, dim=-1).unsqueeze(-1) / n_tok


def aggregate(loss_mat: torch.Tensor, mask: torch.Tensor, mode: str, norm_len: int | None = None) -> torch.Tensor:
    """Reduce a [B,R] per-token loss to a scalar.

    token-mean               sum over all model tokens / number of model tokens (DAPO: every
                             token weighs the same, so long answers are not under-weighted).
    seq-mean-token-sum       per-sequence sum, mean over sequences.
    seq-mean-token-mean      per-sequence mean, mean over sequences (the original GRPO).
    seq-mean-token-sum-norm  per-sequence sum / norm_len (default R), mean over sequences
                             (Dr. GRPO: a constant divisor, not each sequence's length, removes
                             the length bias; pass the max response length so it stays constant
                             from batch to batch).

    Sequence means count only rows with at least one model token: an empty row carries no
    signal and should not shrink the loss. Everything empty: 0.
    """
    if mode == "token-mean":
        return masked_mean(loss_mat, mask)
    if mode not in AGG_MODES:
        raise ValueError(f"unknown loss aggregation {mode!r}; choose one of {list(AGG_MODES)}")
    tok_sum = masked_sum(loss_mat, mask, dim=-1)  # [B]
    n_tok = mask.sum(-1)  # [B]
    if mode == "seq-mean-token-sum":
        seq = tok_sum
    elif mode == "seq-mean-token-mean":
        seq = tok_sum / n_tok.clamp(min=1e-8)
    else:
        norm = mask.shape[-1] if norm_len is None else norm_len
        if norm <= 0:
            raise ValueError(f"norm_len must be > 0, got {norm_len}")
        seq = tok_sum / float(norm)
    rows = (n_tok > 0).to(seq.dtype)  # [B]
    return (seq * rows).sum() / rows.sum().clamp(min=1.0)


@torch.no_grad()
def truncated_is_weights(old_logprobs: torch.Tensor, rollout_logprobs: torch.Tensor, cap: float) -> torch.Tensor:
    """[B,R] min(pi_old / pi_rollout, cap), detached.

    The rollout engine (vLLM, SGLang, bf16 kernels) and the learner compute slightly different
    probabilities for the same weights, so "on-policy" samples are really off-policy.
    Truncated importance sampling corrects for it at bounded variance (Yao et al. 2025, "Your
    Efficient RL Framework Secretly Brings You Off-Policy RL Training"). Multiply the per-token
    policy loss by these (relay.algos.objective.policy_loss(..., is_weights=...)).
    """
    log_w = (old_logprobs - rollout_logprobs).clamp(min=-MAX_LOG_RATIO, max=MAX_LOG_RATIO)
    return log_w.exp().clamp(max=cap)


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    loss_mask: torch.Tensor,
    clip_range: float = 0.2,
    agg_mode: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped value loss (PPO, as in OpenAI baselines): 0.5 * max((v - R)^2, (v_clip - R)^2),
    v_clip = old + clip(v - old, -clip_range, clip_range). Keeps the critic from moving far
    from the values that produced the advantages in one update. All tensors [B,R]."""
    v = on_tokens(loss_mask, values)
    old = on_tokens(loss_mask, old_values.detach())
    ret = on_tokens(loss_mask, returns.detach())
    v_clip = old + (v - old).clamp(-clip_range, clip_range)
    l1 = (v - ret).square()
    l2 = (v_clip - ret).square()
    loss = aggregate(0.5 * torch.maximum(l1, l2), loss_mask, agg_mode)
    with torch.no_grad():
        metrics = {
            "vf_clipfrac": masked_mean((l2 > l1).float(), loss_mask).item(),
            "vpred_mean": masked_mean(v, loss_mask).item(),
        }
    return loss, metrics


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """[B,R,V] -> [B,R] entropy of softmax(logits): logsumexp(l) - sum softmax(l) * l.

    This form never takes the log of a probability, so tiny probabilities do not underflow to
    -inf. The two terms nearly cancel when logits are large (1000 + log 2 - 1000 in float32
    keeps 4 digits), so the max is subtracted first; entropy is shift-invariant, so value and
    gradient are unchanged. Logits must be finite (a -inf logit gives 0 * -inf = NaN); pass
    float32 logits when the entropy feeds the loss, since bf16 softmax is coarse.
    """
    logits = logits - logits.amax(dim=-1, keepdim=True).detach()
    p = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (p * logits).sum(-1)
