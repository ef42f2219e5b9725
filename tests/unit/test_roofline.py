"""benchmarks/roofline.py's helpers on the tiny model: the flop and byte counts, one row per phase
and precision, the logprob gap of each layout. Timings are never asserted: they are the machine's."""

import pytest
import torch

from benchmarks.roofline import (
    against_peaks,
    forward_flops,
    kv_bytes,
    logprob_gaps,
    parameter_counts,
    phase_rows,
    table,
    weight_bytes,
)
from relay.models.loading import load_model, load_tokenizer
from relay.update.precision import bf16_unsupported

SKIP_BF16 = bf16_unsupported(torch.device("cpu"))  # a reason, on a CPU without bf16 matmuls (AVX2 only)
MODES = ("float32",) if SKIP_BF16 else ("float32", "bf16")

SIZES = {"rows": 2, "prompt": 4, "new": 2, "train_rows": 2, "train_length": 6}


def test_counts_follow_the_parameters(tiny_model_path):
    model = load_model(tiny_model_path)
    total, body, head = parameter_counts(model)
    embed = model.get_input_embeddings().weight.numel()
    assert total == sum(p.numel() for p in model.parameters())
    assert body == total - embed - (0 if model.config.tie_word_embeddings else head)
    assert forward_flops(model, tokens=10, projected=1) == 2.0 * (10 * body + head)
    assert weight_bytes(model) == 4.0 * total
    assert kv_bytes(model, 2, 8, torch.bfloat16) == kv_bytes(model, 2, 8, torch.float32) / 2 > 0


def test_every_phase_gets_a_row_in_each_precision(tiny_model_path):
    model = load_model(tiny_model_path)
    peaks = {"float32": 10.0, "bf16": 20.0, "copy GB/s": 5.0, "triad GB/s": 5.0, "in-place GB/s": 6.0, "GB/s": 6.0}
    rows = against_peaks([r for mode in MODES for r in phase_rows(model, mode, SIZES, seconds=0.0)], peaks)
    phases = [
        "prefill",
        "decode, model step",
        "decode, HF generate",
        "learner fwd+bwd",
        "optimizer (AdamW)",
        "weight sync",
    ]
    assert [r["phase"] for r in rows] == phases * len(MODES)
    assert all(r["s"] > 0 and r["flops"] + r["bytes"] > 0 and r["fraction"] > 0 for r in rows)
    assert {r["bound"] for r in rows if r["phase"] == "optimizer (AdamW)"} == {"memory"}
    assert all(p.dtype == torch.float32 for p in model.parameters())  # the phases ran on copies
    assert table(peaks, rows).count("\n| bf16 |") == len(phases) * MODES.count("bf16")


@pytest.mark.skipif(bool(SKIP_BF16), reason=f"{SKIP_BF16}")
def test_logprob_gaps_of_each_layout(tiny_model_path):
    model = load_model(tiny_model_path)
    gaps = logprob_gaps(model, load_tokenizer(tiny_model_path), rows=2, prompt=4, new=3)
    assert set(gaps) == {"float32", "bf16 engine, autocast learner", "colocated autocast"}
    assert gaps["float32"][0] < 1e-4  # one dtype, the same weights: float noise only
    assert all(0 <= mean <= top < 1.0 for mean, top in gaps.values())
