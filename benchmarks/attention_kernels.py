"""The attention kernel on the CPU (model.attn_implementation: sdpa, eager, eager_grouped): a decode
step of a batch with a KV cache, as the HF engine runs it in a multi-turn rollout or held-out
evaluation, and one learner forward/backward, for each kernel in turn (alternating rounds;
medians). Numbers, never assertions.

    python benchmarks/attention_kernels.py [--model smollm2-135m] [--batch 64] [--context 260] [--rounds 3]
    python benchmarks/attention_kernels.py --dtype bfloat16 --threads 2   # a CPU with bf16 matmuls
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from relay.models.loading import load_model

KERNELS = ("sdpa", "eager", "eager_grouped")


def decode_step_s(model, batch: int, context: int, steps: int = 8) -> float:
    """Seconds per decode step of `batch` rows over a `context`-token cache, half the rows left-padded."""
    ids = torch.randint(100, 20_000, (batch, context))
    mask = torch.ones_like(ids)
    mask[: batch // 2, : context // 8] = 0
    with torch.no_grad():
        past = model(input_ids=ids, attention_mask=mask, use_cache=True).past_key_values
        start = time.perf_counter()
        for i in range(steps):
            step_mask = torch.cat([mask, torch.ones(batch, i + 1, dtype=mask.dtype)], 1)
            past = model(
                input_ids=ids[:, -1:], attention_mask=step_mask, past_key_values=past, use_cache=True
            ).past_key_values
    return (time.perf_counter() - start) / steps


def train_step_s(model, rows: int = 8, length: int = 300) -> float:
    ids = torch.randint(100, 20_000, (rows, length))
    start = time.perf_counter()
    model(input_ids=ids, labels=ids).loss.backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--context", type=int, default=260)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    models = {k: load_model(args.model, args.dtype, attn_implementation=k) for k in KERNELS}
    decode, train = {k: [] for k in KERNELS}, {k: [] for k in KERNELS}
    for _ in range(args.rounds):
        for k, model in models.items():
            decode[k].append(decode_step_s(model, args.batch, args.context))
            train[k].append(train_step_s(model))
    for k in KERNELS:
        print(
            f"{k}: decode step, batch {args.batch} over {args.context} tokens: {statistics.median(decode[k]) * 1000:.0f} ms; "
            f"learner forward+backward 8x300: {statistics.median(train[k]):.2f} s"
        )
    for k in KERNELS[1:]:
        ratio = statistics.median(decode[k]) / statistics.median(decode["sdpa"])
        print(f"{k}/sdpa decode time: {ratio:.2f}x")


if __name__ == "__main__":
    main()
