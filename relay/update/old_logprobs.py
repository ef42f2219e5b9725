"""A step's old logprobs (the learner's, on the weights its update starts from): the no-grad pass
over the batch and the whole-batch metrics read from them. Where a step takes them from is chosen
in one place, relay/config/resolved.py: old_logprobs_source.

The metrics that need them over the whole batch (the engine/learner logprob gap, the KL to the
reference) travel as `*_max` / `*_sum` loss metrics, which relay/update/loop.py reduces over
micro-batches and ranks.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from relay.algos.kl import kl_penalty
from relay.run.metric_keys import KL_MEAN
from relay.types import Batch
from relay.update.fsdp import share_rows
from relay.update.policy import compute_logprobs

LOGPROB_DIFF_MAX = "rollout/logprob_diff_max"  # |rollout - old| on model tokens, largest over the batch
LOGPROB_DIFF_MEAN = "rollout/logprob_diff_mean"  # |rollout - old| on model tokens, mean over the batch


def old_logprobs_before_update(model, batch: Batch, temperature: float, sharded: bool) -> torch.Tensor:
    """The no-grad pass: the batch's old logprobs [B,R] on the batch's device. In a rank group
    (`sharded`, FSDP2) each rank computes its share of the rows and every rank gets all of them."""
    device = batch.loss_mask.device
    if not sharded:
        return compute_logprobs(model, batch, temperature).to(device)
    share, has_rows = share_rows(batch)
    parts = [None] * dist.get_world_size()
    rows = compute_logprobs(model, share, temperature, device)  # a rank without rows too: FSDP pairs the passes
    dist.all_gather_object(parts, rows if has_rows else None)
    return torch.cat([p for p in parts if p is not None]).to(device)


def old_logprob_stats(old: torch.Tensor, micro: Batch, kl_estimator: str) -> dict[str, float]:
    """A micro-batch's part of the whole-batch metrics of its old logprobs [B,R]: the largest
    engine/learner gap, and (with reference logprobs) the KL sum over its model tokens."""
    mask = micro.loss_mask
    with torch.no_grad():
        gap = (micro.rollout_logprobs - old).abs() * mask
        stats = {"logprob_diff_max": float(gap.max()), "logprob_diff_sum": float(gap.sum())}
        stats["model_tokens_sum"] = float(mask.sum())
        if micro.ref_logprobs is not None:
            kl = kl_penalty(old, micro.ref_logprobs, kl_estimator)
            stats["kl_ref_sum"] = float((kl * mask).sum())
    return stats


def old_logprob_metrics(actor_metrics: dict[str, float]) -> dict[str, float]:
    """Take the reduced stats out of the update's metrics as the step's metrics."""
    if "logprob_diff_max" not in actor_metrics:
        return {}
    tokens = actor_metrics.pop("model_tokens_sum")
    out = {LOGPROB_DIFF_MAX: actor_metrics.pop("logprob_diff_max")}
    out[LOGPROB_DIFF_MEAN] = actor_metrics.pop("logprob_diff_sum") / tokens if tokens else 0.0
    if "kl_ref_sum" in actor_metrics:
        out[KL_MEAN] = actor_metrics.pop("kl_ref_sum") / tokens if tokens else 0.0
    return out
