"""The HF engine's draw of one token per row (relay/engines/hf_sampling.py: a cumulative sum and one
uniform per row) against `generate`'s own `torch.multinomial`, at a decode step's shape.

    python benchmarks/sampler.py                       # 32 rows x 49,152 (SmolLM2-135M), 2 threads
    python benchmarks/sampler.py --rows 64 --vocab 151936

The two take turns, who goes first alternating; prints the median milliseconds of each and their
ratio, then how far each one's token frequencies over many draws from one small distribution lie
from its probabilities (total variation distance). Numbers, never assertions.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from relay.engines.hf_sampling import inverse_cdf_draw  # noqa: E402


def multinomial_draw(scores: torch.Tensor) -> torch.Tensor:
    """What `generate`'s sampling does with the warped scores."""
    return torch.multinomial(torch.softmax(scores, dim=-1), num_samples=1).squeeze(1)


CONTENDERS = {"multinomial": multinomial_draw, "inverse cdf": inverse_cdf_draw}


def timings(scores: torch.Tensor, rounds: int) -> dict[str, float]:
    seconds: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    names = list(CONTENDERS)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            start = time.perf_counter()
            CONTENDERS[name](scores)
            seconds[name].append(time.perf_counter() - start)
    return {name: statistics.median(s) * 1e3 for name, s in seconds.items()}


def total_variation(draw, probs: torch.Tensor, draws: int) -> float:
    scores = probs.log().expand(draws, -1).contiguous()
    counts = torch.bincount(draw(scores), minlength=probs.numel()).double()
    return 0.5 * (counts / draws - probs.double()).abs().sum().item()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--draws", type=int, default=200_000, help="draws for the frequency check")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    scores = torch.randn(a.rows, a.vocab) * 3  # a peaked distribution, as a trained model's
    ms = timings(scores, a.rounds)
    print(f"{a.rows} rows x {a.vocab} entries, {a.threads} threads, median of {a.rounds} rounds each:")
    for name, value in ms.items():
        print(f"  {name:12s} {value:8.2f} ms")
    print(f"  inverse cdf / multinomial: {ms['inverse cdf'] / ms['multinomial']:.3f}")
    probs = torch.softmax(torch.randn(50) * 2, dim=-1)
    print(f"total variation from the probabilities over {a.draws:,} draws of 50 entries (sampling noise ~ 0.01):")
    for name, draw in CONTENDERS.items():
        print(f"  {name:12s} {total_variation(draw, probs, a.draws):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
