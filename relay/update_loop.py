"""The update loop the Learner and the Critic share: epochs x mini-batches x micro-batches.

Each epoch splits the batch into `mini_batches` mini-batches (shuffled when there is more than
one) and takes one optimizer step per mini-batch, with the gradient norm clipped. A mini-batch
runs as micro-batches of `micro_batch_size` rows whose gradients accumulate, each weighted by
its share of the mini-batch (of its loss tokens for token-mean losses, of its rows otherwise),
so the step equals the one a single forward over the whole mini-batch would take.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from relay.config import TrainingConfig
from relay.types import Batch

# loss_fn(micro-batch) -> (scalar loss with a graph, metrics of that micro-batch)
LossFn = Callable[[Batch], tuple[torch.Tensor, dict[str, float]]]


def shuffle_generator(seed: int, batch: Batch) -> torch.Generator:
    """The mini-batch order's generator: seeded by the run and the batch's first group id, so a
    resumed run shuffles exactly as the uninterrupted one, and the Learner and the Critic (each
    with its own generator) see the same mini-batches."""
    return torch.Generator().manual_seed(seed + int(batch.group_ids[0]))


def mini_batch_indices(batch_size: int, mini_batches: int, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    """Row indices of each mini-batch of one epoch; a single mini-batch keeps the batch's order
    and draws nothing from the generator."""
    order = torch.randperm(batch_size, generator=generator) if mini_batches > 1 else torch.arange(batch_size)
    return order.chunk(mini_batches)


def micro_batch_weight(
    micro: Batch, mini: Batch, mini_tokens: torch.Tensor, weight_by_tokens: bool
) -> torch.Tensor | float:
    """The micro-batch's share of the mini-batch: of its loss tokens (token-mean losses) or of its rows."""
    return micro.loss_mask.sum() / mini_tokens if weight_by_tokens else len(micro) / len(mini)


def run_update(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    loss_fn: LossFn,
    training: TrainingConfig,
    seed: int,
    weight_by_tokens: bool = True,
) -> dict[str, float]:
    """Train `model` on `batch`; the mean of every metric over micro-batches, `grad_norm` (before
    clipping) over optimizer steps taken, and counts of the steps taken and skipped. A step whose
    loss or gradient norm is not finite is skipped: the weights and the optimizer state stay as
    they were (the skip counts say why)."""
    history: dict[str, list[float]] = {}
    counts = dict.fromkeys(
        ("optimizer_steps", "skipped_steps", "skipped_nonfinite_loss", "skipped_nonfinite_grad_norm"), 0.0
    )
    generator = shuffle_generator(seed, batch)
    for _ in range(training.ppo_epochs):
        for mini_idx in mini_batch_indices(len(batch), training.mini_batches, generator):
            mini = batch.select(mini_idx)
            mini_tokens = mini.loss_mask.sum().clamp(min=1)
            optimizer.zero_grad(set_to_none=True)
            finite_loss = True
            for micro_idx in torch.arange(len(mini)).split(training.micro_batch_size):
                micro = mini.select(micro_idx)
                loss, metrics = loss_fn(micro)
                finite_loss &= bool(torch.isfinite(loss.detach()))
                (loss * micro_batch_weight(micro, mini, mini_tokens, weight_by_tokens)).backward()
                for k, v in metrics.items():
                    history.setdefault(k, []).append(v)
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), training.grad_clip)
            if finite_loss and torch.isfinite(grad_norm):
                optimizer.step()
                history.setdefault("grad_norm", []).append(float(grad_norm))
                counts["optimizer_steps"] += 1
            else:  # a NaN or inf never reaches the weights, nor the optimizer's moments
                optimizer.zero_grad(set_to_none=True)
                counts["skipped_steps"] += 1
                counts["skipped_nonfinite_loss" if not finite_loss else "skipped_nonfinite_grad_norm"] += 1
    return {**{k: float(np.mean(v)) for k, v in history.items()}, **counts}
