"""The response logits come from the response columns alone (logits_to_keep), and equal the
columns of a full forward pass, for a plain causal LM and behind a LoRA wrapper."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from relay.types import Batch, Sample
from relay.update.policy import _response_columns, keeps_logits, response_logits


def ragged_batch() -> Batch:
    g = torch.Generator().manual_seed(1)
    samples = [
        Sample(
            prompt_ids=torch.randint(3, 200, (3 + 2 * i,), generator=g).tolist(),
            response_ids=torch.randint(3, 200, (1 + i,), generator=g).tolist(),
            loss_mask=[1] * (1 + i),
            rollout_logprobs=[0.0] * (1 + i),
        )
        for i in range(4)
    ]
    return Batch.from_samples(samples, pad_id=0)


@pytest.mark.parametrize("lora", [False, True])
def test_kept_columns_equal_the_full_forwards_response_columns(tiny_model_path, lora):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path).eval()
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    assert keeps_logits(model)
    batch = ragged_batch()
    with torch.no_grad():
        kept = response_logits(model, batch)
        full = _response_columns(model, batch).float()  # every column projected, then sliced
    assert kept.shape == full.shape == (4, 4, full.shape[-1])
    torch.testing.assert_close(kept, full, rtol=1e-5, atol=1e-5)
