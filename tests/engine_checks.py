"""Engine-vs-learner logprob agreement, shared by the HF, vLLM-CPU and GPU engine tests."""

from __future__ import annotations

import torch

from relay.types import Batch, Sample
from relay.update.policy import response_logprobs


def logprob_diff(model, prompts, groups, temperature: float, pad_id: int) -> tuple[float, float]:
    """(max, mean) |engine logprob - learner logprob| over every generated token, the learner
    being `model` on its own device."""
    samples = [
        Sample(prompt_ids=p, response_ids=c.token_ids, rollout_logprobs=c.logprobs, loss_mask=[1] * len(c.token_ids))
        for p, group in zip(prompts, groups)
        for c in group
    ]
    batch = Batch.from_samples(samples, pad_id)
    with torch.no_grad():
        learner, _ = response_logprobs(model, batch.to(next(model.parameters()).device), temperature)
    diff = (learner.cpu() - batch.rollout_logprobs)[batch.loss_mask.bool()].abs()
    return diff.max().item(), diff.mean().item()


def max_logprob_diff(model, prompts, groups, temperature: float, pad_id: int) -> float:
    return logprob_diff(model, prompts, groups, temperature, pad_id)[0]
