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


def check_top_logprobs(engine, model, prompts, k: int = 5, tol: float = 1e-3) -> None:
    """SamplingParams.top_logprobs = k: the same tokens and logprobs as k = 0 (asking samples
    nothing differently), and per token the k most likely tokens of log_softmax(logits / T) before
    top-p truncation (what the learner scores), most likely first, the learner's own to `tol`."""
    from dataclasses import replace

    from relay.engines.base import SamplingParams

    sampling = SamplingParams(n=2, temperature=0.7, top_p=0.9, max_tokens=6, seed=4)
    plain, alternatives = (
        engine.generate(prompts, sampling),
        engine.generate(prompts, replace(sampling, top_logprobs=k)),
    )
    assert [[(c.token_ids, c.logprobs) for c in g] for g in plain] == [
        [(c.token_ids, c.logprobs) for c in g] for g in alternatives
    ]
    assert all(c.top_logprobs is None for g in plain for c in g)
    device = next(model.parameters()).device
    for prompt, group in zip(prompts, alternatives):
        for c in group:
            assert len(c.top_logprobs) == len(c.token_ids)
            ids = torch.tensor([prompt + c.token_ids], device=device)
            with torch.no_grad():
                logits = (
                    model(ids).logits[0, len(prompt) - 1 : -1].float().cpu()
                )  # [T, V]: the logits of each new token
            learner = torch.log_softmax(logits / sampling.temperature, dim=-1)
            for t, (token, logprob, top) in enumerate(zip(c.token_ids, c.logprobs, c.top_logprobs)):
                values = [v for _, v in top]
                assert len(top) == k and values == sorted(values, reverse=True)
                assert all(abs(v - learner[t, i].item()) < tol for i, v in top)
                assert abs(values[-1] - learner[t].topk(k).values[-1].item()) < tol  # none of the k is missing
                if token in dict(top):
                    assert abs(dict(top)[token] - logprob) < 1e-6  # the sampled token's own logprob, twice
                else:
                    assert logprob <= values[-1] + 1e-6
