"""Policy and value losses, loss aggregation, entropy, truncated importance sampling.

Inputs are [B,R] over response tokens; loss_mask is 1 on model tokens and 0 on padding and
observation tokens. Values under mask 0 never reach the loss or the gradients: every function
selects with torch.where before any exp or product (0 * inf = NaN, see relay.algos.utils).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from relay.algos.names import AGG_MODES
from relay.algos.utils import masked_mean, masked_sum

# exp(20) ~ 5e8: large enough never to bind for a sane policy, small enough to stay finite.
_MAX_LOG_RATIO = 20.0


def _on(mask: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """x on model tokens, 0 elsewhere (whatever x held there)."""
    return torch.where(mask > 0, x, torch.zeros_like(x))


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


def _log_ratio(logprobs: torch.Tensor, old_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B,R] log pi/pi_old on model tokens (0 elsewhere), clamped so exp stays finite."""
    return _on(mask, logprobs - old_logprobs).clamp(min=-_MAX_LOG_RATIO, max=_MAX_LOG_RATIO)


def _finish(pg_mat, clipped, ratio, log_ratio, loss_mask, agg_mode, is_weights, extra=None):
    """Apply IS weights, aggregate, and collect metrics shared by the policy losses."""
    if is_weights is not None:
        pg_mat = pg_mat * _on(loss_mask, is_weights.detach())
    loss = aggregate(pg_mat, loss_mask, agg_mode)
    with torch.no_grad():
        metrics = {
            "pg_clipfrac": masked_mean(clipped.float(), loss_mask).item(),
            "ppo_kl": masked_mean(-log_ratio, loss_mask).item(),  # mean of old - new
            "ratio_mean": masked_mean(ratio, loss_mask).item(),
        }
        if is_weights is not None:
            metrics["is_weight_mean"] = masked_mean(is_weights, loss_mask).item()
        metrics.update(extra or {})
    return loss, metrics


def ppo_loss(
    *,
    logprobs,
    old_logprobs,
    advantages,
    loss_mask,
    clip_low=0.2,
    clip_high=0.2,
    agg_mode="token-mean",
    is_weights=None,
    **_unused,
):
    """Clipped surrogate (Schulman et al. 2017): max(-A r, -A clip(r, 1-clip_low, 1+clip_high)).

    Separate low/high bounds are DAPO's clip-higher (Yu et al. 2025): a larger clip_high lets
    low-probability tokens grow, which keeps entropy from collapsing.
    """
    log_ratio = _log_ratio(logprobs, old_logprobs, loss_mask)
    ratio = log_ratio.exp()  # [B,R]
    adv = _on(loss_mask, advantages.detach())
    pg1 = -adv * ratio
    pg2 = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    return _finish(torch.maximum(pg1, pg2), pg2 > pg1, ratio, log_ratio, loss_mask, agg_mode, is_weights)


def dual_clip_loss(
    *,
    logprobs,
    old_logprobs,
    advantages,
    loss_mask,
    clip_low=0.2,
    clip_high=0.2,
    dual_clip_c=3.0,
    agg_mode="token-mean",
    is_weights=None,
    **_unused,
):
    """Dual-clip PPO (Ye et al. 2020, "Mastering Complex Control in MOBA Games with Deep RL").

    For A < 0 the clipped surrogate -A * r grows without bound in r: a token whose ratio
    exploded (stale or off-policy data) would dominate the batch. The loss is further capped at
    -A * c there, which also zeroes that token's gradient.
    """
    if dual_clip_c <= 1.0:
        raise ValueError(f"dual_clip_c must be > 1, got {dual_clip_c}")
    log_ratio = _log_ratio(logprobs, old_logprobs, loss_mask)
    ratio = log_ratio.exp()
    adv = _on(loss_mask, advantages.detach())
    pg1 = -adv * ratio
    pg2 = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    clipped = torch.maximum(pg1, pg2)
    pg3 = -adv * dual_clip_c
    lower = (adv < 0) & (pg3 < clipped)
    pg_mat = torch.where(adv < 0, torch.minimum(clipped, pg3), clipped)
    with torch.no_grad():
        extra = {"pg_clipfrac_lower": masked_mean(lower.float(), loss_mask).item()}
    return _finish(pg_mat, pg2 > pg1, ratio, log_ratio, loss_mask, agg_mode, is_weights, extra)


def gspo_loss(
    *,
    logprobs,
    old_logprobs,
    advantages,
    loss_mask,
    clip_low=0.2,
    clip_high=0.2,
    agg_mode="token-mean",
    is_weights=None,
    **_unused,
):
    """GSPO (Zheng et al. 2025, "Group Sequence Policy Optimization"), token form (GSPO-token).

    s_i = exp(mean over model tokens of log pi/pi_old): one length-normalized ratio per
    sequence, clipped as a whole, since the reward is per sequence too; per-token ratios add
    noise that clipping then amplifies. Per token, s_{i,t} = sg[s_i] * pi_t / sg[pi_t]: its value
    is s_i, its gradient s_i * grad log pi_t, so with sequence-level advantages and the
    "seq-mean-token-mean" aggregation it is exactly the paper's GSPO objective, and it also
    accepts token-level advantages. The paper's clip ranges are ~1e-3 (3e-4 / 4e-4), far
    below PPO's 0.2, because a sequence ratio is an average.
    """
    log_ratio = _log_ratio(logprobs, old_logprobs, loss_mask)
    n_tok = loss_mask.sum(-1, keepdim=True).clamp(min=1.0)  # [B,1]
    seq_log_ratio = masked_sum(log_ratio, loss_mask, dim=-1).unsqueeze(-1) / n_tok  # [B,1]
    logp = _on(loss_mask, logprobs)
    log_s = (logp - logp.detach() + seq_log_ratio.detach()).clamp(max=_MAX_LOG_RATIO)  # [B,R]
    ratio = _on(loss_mask, log_s.exp())
    adv = _on(loss_mask, advantages.detach())
    pg1 = -adv * ratio
    pg2 = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    return _finish(torch.maximum(pg1, pg2), pg2 > pg1, ratio, log_ratio, loss_mask, agg_mode, is_weights)


POLICY_LOSSES: dict[str, Callable[..., tuple[torch.Tensor, dict[str, float]]]] = {
    "ppo": ppo_loss,
    "dual_clip": dual_clip_loss,
    "gspo": gspo_loss,
}


def policy_loss(
    name: str,
    *,
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip_c: float = 3.0,
    agg_mode: str = "token-mean",
    is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """POLICY_LOSSES[name](...) -> (scalar loss, metrics). All tensors [B,R].

    Metrics: pg_clipfrac (share of model tokens where the clipped term is active), ppo_kl
    (mean of old - new logprob), ratio_mean; dual_clip adds pg_clipfrac_lower; is_weight_mean
    when is_weights is given.
    """
    try:
        fn = POLICY_LOSSES[name]
    except KeyError:
        raise ValueError(f"unknown policy loss {name!r}; choose one of {sorted(POLICY_LOSSES)}") from None
    return fn(
        logprobs=logprobs,
        old_logprobs=old_logprobs,
        advantages=advantages,
        loss_mask=loss_mask,
        clip_low=clip_low,
        clip_high=clip_high,
        dual_clip_c=dual_clip_c,
        agg_mode=agg_mode,
        is_weights=is_weights,
    )


@torch.no_grad()
def truncated_is_weights(old_logprobs: torch.Tensor, rollout_logprobs: torch.Tensor, cap: float) -> torch.Tensor:
    """[B,R] min(pi_old / pi_rollout, cap), detached.

    The rollout engine (vLLM, SGLang, bf16 kernels) and the learner compute slightly different
    probabilities for the same weights, so "on-policy" samples are really off-policy.
    Truncated importance sampling corrects for it at bounded variance (Yao et al. 2025, "Your
    Efficient RL Framework Secretly Brings You Off-Policy RL Training"). Multiply the per-token
    policy loss by these (policy_loss(..., is_weights=...)).
    """
    log_w = (old_logprobs - rollout_logprobs).clamp(min=-_MAX_LOG_RATIO, max=_MAX_LOG_RATIO)
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
    v = _on(loss_mask, values)
    old = _on(loss_mask, old_values.detach())
    ret = _on(loss_mask, returns.detach())
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
