"""The learning rate over optimizer steps: linear warm-up, then constant, linear or cosine decay.

A multiplier of `training.lr` (torch's LambdaLR applies it), so the schedule's state is one
step counter that the checkpoint carries. The default (constant, no warm-up) multiplies by
exactly 1.0: the learning rate of a run without a schedule.
"""

from __future__ import annotations

import functools
import math

import torch

from relay.config import TrainingConfig


def lr_factor(step: int, schedule: str, warmup_steps: int, total_steps: int, min_lr_ratio: float) -> float:
    """Multiplier of the base learning rate for optimizer step `step` (0-based).

    Warm-up rises linearly from 1 / (warmup_steps + 1) to 1, so the first step already moves the
    weights; decay then runs from 1 at the end of warm-up to min_lr_ratio at the last step.
    """
    if step < warmup_steps:
        return (step + 1) / (warmup_steps + 1)
    if schedule == "constant":
        return 1.0
    decay_steps = max(1, total_steps - 1 - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / decay_steps)
    if schedule == "linear":
        shape = 1.0 - progress
    elif schedule == "cosine":
        shape = 0.5 * (1.0 + math.cos(math.pi * progress))
    else:
        raise ValueError(f"unknown lr schedule {schedule!r}")
    return min_lr_ratio + (1.0 - min_lr_ratio) * shape


def total_optimizer_steps(training: TrainingConfig) -> int:
    """Optimizer steps in a whole run: one per mini-batch, per PPO epoch, per RL step."""
    return training.steps * training.ppo_epochs * training.mini_batches


def make_lr_scheduler(optimizer: torch.optim.Optimizer, training: TrainingConfig) -> torch.optim.lr_scheduler.LambdaLR:
    factor = functools.partial(
        lr_factor,
        schedule=training.lr_schedule,
        warmup_steps=training.warmup_steps,
        total_steps=total_optimizer_steps(training),
        min_lr_ratio=training.min_lr_ratio,
    )
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
