"""The update loop the Learner and the Critic share: epochs x mini-batches x micro-batches.

Each epoch splits the batch into `mini_batches` mini-batches (shuffled when there is more than
one) and takes one optimizer step per mini-batch, with the gradient norm clipped. A mini-batch
runs as micro-batches of `micro_batch_size` rows whose gradients accumulate, each weighted by
its share of the mini-batch (of its loss tokens for token-mean losses, of its rows otherwise),
so the step equals the one a single forward over the whole mini-batch would take.

With `training.max_tokens_per_micro_batch` the micro-batches are cut by real tokens instead of
rows: rows sorted by length, so each micro-batch holds rows of similar length, and its padding
columns trimmed (as verl's dynamic batch size does; the weights stay each micro-batch's share).

Data parallel ranks (a rank group, relay/update/fsdp.py) each hold the whole batch and take their share
of every mini-batch's rows; the weights stay shares of the whole mini-batch, so the gradients
summed over ranks are the one-rank gradient. Every rank runs the same number of forward and
backward passes (FSDP's collectives pair them up): a rank with fewer rows runs zero-weighted ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields

import numpy as np
import torch
import torch.distributed as dist

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


def rank_rows(rows: int, rank: int, world_size: int) -> torch.Tensor:
    """This rank's share of `rows` rows: consecutive, sizes differing by at most one."""
    return torch.arange(rows).tensor_split(world_size)[rank]


def micro_batch_rows(lengths: torch.Tensor, micro_batch_size: int, max_tokens: int, count: int | None = None):
    """Row indices of each micro-batch of rows with `lengths` real tokens.

    max_tokens 0: consecutive runs of micro_batch_size rows. Else rows sorted by length (so a
    micro-batch's rows need little padding), cut where the running token count passes each
    multiple of total / count, count = ceil(total / max_tokens). A given `count` (the most any
    rank needs) overrides; micro-batches may then be empty.
    """
    rows = len(lengths)
    if max_tokens <= 0:
        if count is None or count == -(-rows // micro_batch_size):
            return list(torch.arange(rows).split(micro_batch_size))
        return list(torch.arange(rows).tensor_split(count))
    order = torch.sort(lengths, stable=True).indices
    total = int(lengths.sum())
    fixed = count is not None
    count = count or max(1, min(rows, -(-total // max_tokens)))
    ends = lengths[order].cumsum(0)
    # the micro-batch of each row: which share of the total its last token falls in
    which = ((ends - 1) * count // max(total, 1)).clamp(max=count - 1)
    micro = [order[which == k] for k in range(count)]
    return micro if fixed else [rows for rows in micro if len(rows)] or [order]


def trim_padding(micro: Batch) -> Batch:
    """The micro-batch without prompt columns that are padding in every row (left) and response
    columns past its longest response (right): the same logits, less compute."""
    P = micro.prompt_width
    real = micro.attention_mask.bool()
    first = int(real[:, :P].any(0).nonzero()[0]) if real[:, :P].any() else P - 1
    first = min(first, P - 1)  # column P-1 predicts response token 0: always keep it
    width = max(1, int(real[:, P:].any(0).nonzero().max()) + 1) if real[:, P:].any() else 1
    full = torch.cat([torch.arange(first, P), torch.arange(P, P + width)])

    columns = {"prompts": torch.arange(first, P), "attention_mask": full, "position_ids": full}
    trimmed = {}
    for f in fields(micro):
        t = getattr(micro, f.name)
        if t is not None and t.dim() == 2:
            t = t[:, columns.get(f.name, slice(0, width))]
        trimmed[f.name] = t
    return Batch(**trimmed)


def run_update(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    loss_fn: LossFn,
    training: TrainingConfig,
    seed: int,
    weight_by_tokens: bool = True,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    rank: int = 0,
    world_size: int = 1,
) -> dict[str, float]:
    """Train `model` on `batch`; every loss metric of the mini-batches (micro-batch metrics weighted
    by their share, over every rank), `grad_norm` (before clipping) and `lr` over optimizer steps
    taken, and counts of the steps taken and skipped. A step whose loss or gradient norm is not
    finite (on any rank) is skipped: the weights, the optimizer state and the lr schedule stay as
    they were (the skip counts say why). With world_size > 1 this is one rank of a torch.distributed
    default group whose ranks all call it with the same batch."""
    history: dict[str, list] = {}  # loss metrics: (value, weight) per micro-batch; grad_norm, lr: values
    counts = dict.fromkeys(
        ("optimizer_steps", "skipped_steps", "skipped_nonfinite_loss", "skipped_nonfinite_grad_norm"), 0.0
    )
    generator = shuffle_generator(seed, batch)
    for _ in range(training.ppo_epochs):
        for mini_idx in mini_batch_indices(len(batch), training.mini_batches, generator):
            mini = batch.select(mini_idx)
            mini_tokens = mini.loss_mask.sum().clamp(min=1)
            share = mini.select(rank_rows(len(mini), rank, world_size))
            optimizer.zero_grad(set_to_none=True)
            finite_loss = True
            for rows in _micro_batches(share, training, world_size):
                if len(rows) == 0:  # keeps this rank's FSDP collectives paired with the others'
                    loss, metrics = loss_fn(mini.select([0]))
                    (loss * 0.0).backward()
                    for k in metrics:  # the same keys on every rank, this rank adding nothing
                        history.setdefault(k, [])
                    continue
                micro = share.select(rows)
                if training.max_tokens_per_micro_batch:
                    micro = trim_padding(micro)
                loss, metrics = loss_fn(micro)
                finite_loss &= bool(torch.isfinite(loss.detach()))
                weight = micro_batch_weight(micro, mini, mini_tokens, weight_by_tokens)
                (loss * weight * world_size).backward()  # FSDP averages gradients over ranks: undo that
                for k, v in metrics.items():
                    history.setdefault(k, []).append((v, float(weight)))
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), training.grad_clip)
            grad_norm = grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm  # a DTensor (FSDP)
            if world_size > 1:  # every rank takes the step or none does
                finite = torch.tensor([float(finite_loss)])
                dist.all_reduce(finite, op=dist.ReduceOp.MIN)
                finite_loss = bool(finite.item())
            if finite_loss and torch.isfinite(grad_norm):
                lr = optimizer.param_groups[0]["lr"]
                optimizer.step()
                if scheduler is not None:
                    scheduler.step()
                history.setdefault("grad_norm", []).append(float(grad_norm))
                history.setdefault("lr", []).append(float(lr))
                counts["optimizer_steps"] += 1
            else:  # a NaN or inf never reaches the weights, nor the optimizer's moments
                optimizer.zero_grad(set_to_none=True)
                counts["skipped_steps"] += 1
                counts["skipped_nonfinite_loss" if not finite_loss else "skipped_nonfinite_grad_norm"] += 1
    return {**_means(history, world_size), **counts}


def _micro_batches(share: Batch, training: TrainingConfig, world_size: int) -> list[torch.Tensor]:
    """Row indices of this rank's micro-batches: as many on every rank (the most any rank needs)."""
    lengths = share.attention_mask.sum(1)
    rows = micro_batch_rows(lengths, training.micro_batch_size, training.max_tokens_per_micro_batch)
    if world_size == 1:
        return rows
    count = torch.tensor([len(rows)])
    dist.all_reduce(count, op=dist.ReduceOp.MAX)
    if int(count) == len(rows):
        return rows
    return micro_batch_rows(lengths, training.micro_batch_size, training.max_tokens_per_micro_batch, int(count))


def _means(history: dict[str, list], world_size: int) -> dict[str, float]:
    """Each loss metric weighted by its micro-batch's share of the mini-batch (what the whole
    mini-batch's forward would report, however it is cut into micro-batches and ranks), averaged
    over mini-batches; grad_norm and lr (the same on every rank) averaged over optimizer steps.
    Metrics named `*_max` are the largest value and `*_sum` the total over every micro-batch and
    rank (a maximum or a ratio of sums over the whole batch, which a weighted mean cannot give)."""
    per_step = ("grad_norm", "lr")
    totals = _totals(history, world_size)
    keys = sorted(k for k in history if k not in per_step and k not in totals)
    sums = torch.tensor(
        [
            [
                sum(v * w for v, w in history[k]),
                sum(w for _, w in history[k]),
                sum(v for v, _ in history[k]),
                len(history[k]),
            ]
            for k in keys
        ],
        dtype=torch.float64,
    ).reshape(len(keys), 4)
    if world_size > 1:
        dist.all_reduce(sums)
    # no loss tokens at all (every weight 0): the plain mean
    means = {k: float(vw / w if w else v / max(n, 1)) for k, (vw, w, v, n) in zip(keys, sums.tolist())}
    return means | totals | {k: float(np.mean(history[k])) for k in per_step if k in history}


def _totals(history: dict[str, list], world_size: int) -> dict[str, float]:
    """The `*_max` and `*_sum` metrics over micro-batches and ranks (every rank has the same keys;
    `*_max` metrics are magnitudes, so a rank without rows adds a 0)."""
    found = {}
    for suffix, op in (("_max", dist.ReduceOp.MAX), ("_sum", dist.ReduceOp.SUM)):
        keys = sorted(k for k in history if k.endswith(suffix))
        if not keys:
            continue
        values = [[v for v, _ in history[k]] for k in keys]
        reduced = torch.tensor(
            [max(v, default=0.0) if suffix == "_max" else sum(v) for v in values], dtype=torch.float64
        )
        if world_size > 1:
            dist.all_reduce(reduced, op=op)
        found |= dict(zip(keys, reduced.tolist()))
    return found
