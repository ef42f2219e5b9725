"""model.attn_implementation=eager_grouped (relay/models/attention.py) computes eager attention
without repeating key/value heads: the same logits as eager on a left-padded batch, the same
gradients, and the same greedy tokens through a KV cache."""

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from relay.models.attention import eager_grouped_attention
from relay.models.loading import load_model


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    torch.manual_seed(0)
    config = Qwen2Config(  # 3 query heads share each key/value head
        vocab_size=64,
        hidden_size=48,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=6,
        num_key_value_heads=2,
        pad_token_id=0,
    )
    model = Qwen2ForCausalLM(config)
    path = tmp_path_factory.mktemp("gqa")
    model.save_pretrained(path)
    return str(path)


def batch():
    ids = torch.tensor([[0, 0, 5, 9, 17, 3], [4, 8, 15, 16, 23, 42]])
    return ids, (ids != 0).long()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_logits_and_gradients_match_eager(folder, dtype):
    ids, mask = batch()
    results = {}
    for kernel in ("eager", "eager_grouped"):
        model = load_model(folder, attn_implementation=kernel).to(dtype)
        assert model.config._attn_implementation == kernel
        logits = model(input_ids=ids, attention_mask=mask).logits
        logits[mask.bool()].float().logsumexp(-1).sum().backward()
        grad = model.model.layers[0].self_attn.k_proj.weight.grad
        results[kernel] = logits[mask.bool()].float(), grad.float()
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    for got, want in zip(results["eager_grouped"], results["eager"]):
        assert torch.allclose(got, want, atol=tolerance, rtol=tolerance), (got - want).abs().max()


def test_greedy_decoding_through_the_cache_matches_eager(folder):
    ids, mask = batch()
    tokens = {}
    for kernel in ("eager", "eager_grouped"):
        model = load_model(folder, attn_implementation=kernel).eval()
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8, do_sample=False, pad_token_id=0)
        tokens[kernel] = out[:, ids.shape[1] :]
    assert torch.equal(tokens["eager_grouped"], tokens["eager"])


def test_score_capping_is_refused_in_one_line():
    q, kv = torch.zeros(1, 4, 2, 8), torch.zeros(1, 2, 2, 8)
    with pytest.raises(ValueError, match="model.attn_implementation=eager"):
        eager_grouped_attention(torch.nn.Module(), q, kv, kv, None, scaling=1.0, softcap=30.0)
