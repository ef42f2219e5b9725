"""The HF engine's sampler: one uniform draw per row against the cumulative distribution, in place
of `generate`'s `torch.multinomial`.

On a CPU, `torch.multinomial` draws an exponential variate for every vocabulary entry of every
row, 32 x 49,152 a decode step for a GRPO group of SmolLM2-135M, which made it a tenth of a bf16
step. A cumulative sum and one uniform per row draw from the same distribution for a fraction of
that (benchmarks/sampler.py). The warping is transformers' own (temperature, then top-k, then
top-p, as `generate` orders them); only the random stream differs from `generate`'s sampling.

`generate` runs greedy with `InverseCdfSampler` as its last logits processor: the processor turns
each row's scores into its sampled token (0 there, -inf elsewhere), which greedy's argmax picks.
The raw logits `generate` returns (output_logits), which the engine's logprobs come from, are the
model's own.
"""

from __future__ import annotations

import torch
from transformers import (
    LogitsProcessor,
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)


def inverse_cdf_draw(scores: torch.Tensor) -> torch.Tensor:
    """One token per row of `scores` [N, V], drawn with probability softmax(scores): the first
    entry whose cumulative probability passes a uniform draw over the row's total. An entry of
    probability 0 adds nothing to the sum, so no draw lands on it. The sum runs in float64: in
    float32, once it nears 1, entries under about 3e-8 (most of a 49k vocabulary's tail) would add
    nothing and never be drawn. The uniform is float32's 24 bits, one draw per row from torch's
    global generator (seeded per request by SamplingParams.seed)."""
    cdf = torch.softmax(scores.float(), dim=-1).double().cumsum_(dim=-1)
    u = torch.rand(cdf.shape[0], 1, device=cdf.device) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).clamp_(max=cdf.shape[-1] - 1).squeeze(1)


class InverseCdfSampler(LogitsProcessor):
    def __init__(self, temperature: float, top_k: int, top_p: float):
        warpers = [TemperatureLogitsWarper(temperature)] if temperature != 1.0 else []
        if top_k > 0:
            warpers.append(TopKLogitsWarper(top_k))
        if top_p < 1.0:
            warpers.append(TopPLogitsWarper(top_p))
        self.warpers = LogitsProcessorList(warpers)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        picks = inverse_cdf_draw(self.warpers(input_ids, scores))
        chosen = torch.full_like(scores, float("-inf"))
        return chosen.scatter_(1, picks.unsqueeze(1), 0.0)
