"""One supervised step (sft.*): the mean negative log-likelihood of the loss-masked tokens (the
assistant turns of demonstration conversations), through the same update loop as RL, so
micro-batching, gradient clipping, non-finite skips and rank groups behave alike."""

from __future__ import annotations

import dataclasses

import torch

from relay.algos.losses import aggregate
from relay.config import TrainingConfig
from relay.types import Batch
from relay.update.loop import run_update
from relay.update.policy import response_logprobs


def supervised_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    training: TrainingConfig,
    rank: int = 0,
    world_size: int = 1,
) -> dict[str, float]:
    """One optimizer step on `batch`; metrics under sft/ (sft/nll, sft/grad_norm, sft/tokens, ...)."""

    def loss(micro: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        logprobs, _ = response_logprobs(model, micro, 1.0)
        nll = aggregate(-logprobs, micro.loss_mask, "token-mean")
        return nll, {"nll": nll.item()}

    one_step = dataclasses.replace(training, ppo_epochs=1, mini_batches=1)
    metrics = run_update(model, optimizer, batch, loss, one_step, seed=0, rank=rank, world_size=world_size)
    return {f"sft/{k}": v for k, v in metrics.items()} | {"sft/tokens": float(batch.loss_mask.sum())}
