"""The response logits come from the response columns alone (logits_to_keep), and rows that share
a prompt run it once (shared_prompt_logits); either way they equal the columns of a full forward
pass, with the same gradients, for a plain causal LM and behind a LoRA wrapper."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from relay.types import Batch, Sample
from relay.update import policy
from relay.update.policy import (
    _response_columns,
    keeps_logits,
    prompt_tokens_skipped,
    response_logits,
    shared_prompt_logits,
)


def ragged_batch(group_size: int = 1, longest_response: int = 4) -> Batch:
    """4 prompts of 3..9 tokens, each `group_size` times in a row, with responses of 1..longest tokens."""
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, 200, (3 + 2 * i,), generator=g).tolist() for i in range(4)]
    samples = []
    for i, prompt in enumerate(prompts):
        for j in range(group_size):
            length = 1 + (i + j) % longest_response
            samples.append(
                Sample(
                    prompt_ids=prompt,
                    response_ids=torch.randint(3, 200, (length,), generator=g).tolist(),
                    loss_mask=[1] * length,
                    rollout_logprobs=[0.0] * length,
                )
            )
    return Batch.from_samples(samples, pad_id=0)


def tiny(path: str, lora: bool):
    torch.manual_seed(0)  # the adapters' initial weights
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    return model


@pytest.mark.parametrize("lora", [False, True])
def test_kept_columns_equal_the_full_forwards_response_columns(tiny_model_path, lora):
    model = tiny(tiny_model_path, lora)
    assert keeps_logits(model)
    batch = ragged_batch()
    with torch.no_grad():
        kept = response_logits(model, batch)
        full = _response_columns(model, batch).float()  # every column projected, then sliced
    assert kept.shape == full.shape == (4, 4, full.shape[-1])
    torch.testing.assert_close(kept, full, rtol=1e-5, atol=1e-5)


def gradients(model) -> dict[str, torch.Tensor]:
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    return grads


@pytest.mark.parametrize("lora", [False, True])
@pytest.mark.parametrize("longest_response", [1, 4])
def test_shared_prompts_give_the_full_forwards_logits_and_gradients(
    tiny_model_path, lora, longest_response, monkeypatch
):
    model = tiny(tiny_model_path, lora)
    batch = ragged_batch(group_size=3, longest_response=longest_response)
    weights = torch.randn(batch.responses.shape + (1,), generator=torch.Generator().manual_seed(2))

    shared = shared_prompt_logits(model, batch)
    # too few prompt tokens repeat here for the second pass to pay: one full forward
    assert prompt_tokens_skipped(batch) < policy.SHARED_PROMPT_MIN_SKIPPED_TOKENS
    assert torch.equal(
        response_logits(model, batch),
        _response_columns(model, batch, logits_to_keep=batch.responses.shape[1] + 1).float(),
    )
    monkeypatch.setattr(policy, "SHARED_PROMPT_MIN_SKIPPED_TOKENS", 0)
    assert shared is not None and torch.equal(response_logits(model, batch), shared.float())
    (shared.float() * weights).sum().backward()
    shared_grads = gradients(model)
    full = _response_columns(model, batch).float()
    (full * weights).sum().backward()
    full_grads = gradients(model)

    assert shared.shape == full.shape == (12, longest_response, full.shape[-1])
    torch.testing.assert_close(shared.float(), full, rtol=1e-5, atol=1e-5)
    assert shared_grads.keys() == full_grads.keys() and full_grads
    # float summation order only: up to 8e-6 of a gradient's norm over 8 adapter initializations
    for name, grad in full_grads.items():
        assert (shared_grads[name] - grad).norm() <= 3e-5 * grad.norm(), name
