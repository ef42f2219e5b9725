"""The HF engine's sampler (relay/engines/hf_sampling.py): draws follow softmax(scores), entries of
probability 0 are never drawn, and temperature, top-k and top-p warp as transformers' sampling does."""

import torch

from relay.engines.hf_sampling import InverseCdfSampler, inverse_cdf_draw


def frequencies(draws: torch.Tensor, size: int) -> torch.Tensor:
    return torch.bincount(draws, minlength=size).double() / len(draws)


def test_draws_follow_the_softmax_and_skip_impossible_entries():
    torch.manual_seed(0)
    probs = torch.tensor([0.5, 0.0, 0.3, 0.15, 0.0, 0.05])
    scores = probs.log().expand(200_000, -1).contiguous()  # log 0 = -inf
    seen = frequencies(inverse_cdf_draw(scores), len(probs))
    assert seen[1] == 0 and seen[4] == 0
    assert torch.allclose(seen, probs.double(), atol=0.005), seen


def test_one_token_a_row_at_score_zero_and_the_rest_minus_infinity():
    torch.manual_seed(0)
    scores = torch.randn(4, 10)
    out = InverseCdfSampler(temperature=1.0, top_k=0, top_p=1.0)(torch.zeros(4, 1, dtype=torch.long), scores)
    assert (out == 0).sum(-1).tolist() == [1, 1, 1, 1]
    assert torch.isinf(out).sum() == 4 * 9


def test_temperature_top_k_and_top_p_warp_like_transformers_sampling():
    torch.manual_seed(0)
    scores = torch.tensor([[2.0, 1.5, 1.0, 0.5, 0.0, -1.0]]).expand(100_000, -1).contiguous()
    ids = torch.zeros(len(scores), 1, dtype=torch.long)

    def drawn(sampler):
        return frequencies(sampler(ids, scores.clone()).argmax(-1), scores.shape[1])

    top_k = drawn(InverseCdfSampler(temperature=1.0, top_k=3, top_p=1.0))
    assert top_k[3:].sum() == 0
    assert torch.allclose(top_k[:3], torch.softmax(scores[0, :3].double(), -1), atol=0.01)
    hot = drawn(InverseCdfSampler(temperature=2.0, top_k=0, top_p=1.0))
    assert torch.allclose(hot, torch.softmax(scores[0].double() / 2, -1), atol=0.01)
    probs = torch.softmax(scores[0].double(), -1)  # 0.43, 0.26, 0.16, ...: top-p 0.6 keeps the first two
    nucleus = drawn(InverseCdfSampler(temperature=1.0, top_k=0, top_p=0.6))
    assert nucleus[2:].sum() == 0
    assert torch.allclose(nucleus[:2], probs[:2] / probs[:2].sum(), atol=0.01)
