"""How far each phase of an RL step runs from this machine's limit, in float32 and in bf16.

    python benchmarks/roofline.py [--model smollm2-135m] [--threads 2] [--seconds 1.5] [--random-weights]

First this machine's peaks, measured in the same run with the same torch threads: the matmul
rate of 2048x2048 float32 and bf16 products, and the memory bandwidth of 256 MB arrays (a copy,
a STREAM triad a = b + s*c, an in-place add), at the start and again at the end (the best of both kept: another
process's burst lowers a peak). Then, on the model, each phase of a step, timed, with the flops
it multiplies and the bytes it moves:

    prefill            engine forward over the prompts (KV cache kept)
    decode, model      one-token forward steps on that cache (every weight and the KV cache read)
    decode, generate   HF generate's loop: n tokens' time less 1 token's
    learner fwd+bwd    forward and backward of the learner's rows (bf16: autocast)
    optimizer          fused AdamW over float32 masters (28 bytes a parameter)
    weight sync        float32 masters copied into the engine's dtype

Each phase's roofline is the least time its flops allow at the matmul peak of its dtype and its
bytes at the best bandwidth; "of the bound" is that time over the measured one (100%: at the
machine's limit; a small-batch decode step is bound by neither, its GEMMs too thin for the peak).

FLOPs are 2 x parameters x tokens forward and 6 x for forward and backward (the usual count, as
in Kaplan et al. 2020 and the MFU of PaLM, Chowdhery et al. 2022), with the embedding gather
taken off and the vocabulary projection counted only at the columns that are projected; the
attention's own score matmuls (a few % at these lengths) are not counted. bf16 runs the learner
under relay's autocast (relay/update/precision.py: training.mixed_precision=bf16) and the engine
on a bf16 copy (model.dtype=bfloat16). --gap adds the engine/learner logprob gap of each layout.
Numbers, never assertions: a busy machine shows in them.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import time

import torch

from relay.config.schema import TrainingConfig
from relay.engines.hf import load_named_tensors
from relay.update.precision import autocast_forward, bf16_unsupported

MIB = 2**20


def best_seconds(fn, seconds: float, least: int = 3) -> float:
    """The fastest of repeated calls of `fn` within about `seconds` (at least `least` calls): the
    machine's own speed, with another process's bursts filtered out as well as one run can. The
    first call (allocation, oneDNN's kernel choice) counts: the minimum leaves it out anyway."""
    times, start = [], time.perf_counter()
    while len(times) < least or time.perf_counter() - start < seconds:
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def matmul_peak(dtype: torch.dtype, seconds: float, n: int = 2048) -> float:
    """GFLOP/s of an n x n x n product (2 n^3 flops) in `dtype`."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    out = torch.empty(n, n, dtype=dtype)
    return 2 * n**3 / best_seconds(lambda: torch.mm(a, b, out=out), seconds) / 1e9


def bandwidth(seconds: float, mib: int = 256) -> dict[str, float]:
    """GB/s of `mib` MiB arrays, large enough that no cache holds them: a copy (read + write) and a
    STREAM triad (two reads, one write), counted as STREAM counts them, and an in-place add
    (a += b: two reads, one write back to a line already read). The first two also read each line
    they write (write-allocate), uncounted, so the in-place pattern, which AdamW and a weight load
    share, shows more of the bus: the roofline takes the best of the three."""
    n = mib * MIB // 4
    a, b, c = torch.rand(n), torch.rand(n), torch.rand(n)
    copy_s = best_seconds(lambda: a.copy_(b), seconds)
    triad_s = best_seconds(lambda: torch.add(b, c, alpha=3.0, out=a), seconds)
    add_s = best_seconds(lambda: a.add_(b, alpha=1e-9), seconds)
    return {"copy": 2 * n * 4 / copy_s / 1e9, "triad": 3 * n * 4 / triad_s / 1e9, "in-place": 3 * n * 4 / add_s / 1e9}


def machine_peaks(seconds: float) -> dict[str, float]:
    peaks = {"float32": matmul_peak(torch.float32, seconds), "bf16": matmul_peak(torch.bfloat16, seconds)}
    moved = bandwidth(seconds)
    return peaks | {f"{k} GB/s": v for k, v in moved.items()} | {"GB/s": max(moved.values())}


def parameter_counts(model) -> tuple[int, int, int]:
    """(all parameters, those multiplied per token: all but the input embedding, the vocabulary
    projection's): a tied embedding is one tensor, multiplied once as the projection."""
    total = sum(p.numel() for p in model.parameters())
    embed = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    tied = embed.data_ptr() == head.data_ptr()
    body = total - embed.numel() - (0 if tied else head.numel())
    return total, body, head.numel()


def forward_flops(model, tokens: int, projected: int) -> float:
    """2 x multiplied parameters x tokens, the vocabulary projection at `projected` columns."""
    _, body, head = parameter_counts(model)
    return 2.0 * (body * tokens + head * projected)


def kv_bytes(model, rows: int, context: int, dtype: torch.dtype) -> float:
    """Bytes of the KV cache a decode step reads at `context` tokens per row."""
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    kv_heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
    return 2.0 * c.num_hidden_layers * rows * context * kv_heads * head_dim * torch.finfo(dtype).bits / 8


def weight_bytes(model) -> float:
    return float(sum(p.numel() * p.element_size() for p in model.parameters()))


def prompts(rows: int, length: int, vocab: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, vocab, (rows, length), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def engine_phases(engine, rows: int, prompt: int, new: int, seconds: float) -> dict[str, tuple[float, float, float]]:
    """{phase: (seconds, flops, bytes moved)} of the engine model: a decode step reads every weight
    and the KV cache, and multiplies `rows` tokens through the model (small-M GEMMs)."""
    ids = prompts(rows, prompt, engine.config.vocab_size)
    mask = torch.ones_like(ids)
    dtype = next(engine.parameters()).dtype

    def prefill():
        return engine(input_ids=ids, attention_mask=mask, use_cache=True, logits_to_keep=1).past_key_values

    prefill_s = best_seconds(prefill, seconds)
    start_cache = prefill()

    def decode():
        past, step = copy.deepcopy(start_cache), ids[:, -1:]
        for i in range(new):
            full = torch.ones(rows, prompt + i + 1, dtype=mask.dtype)
            out = engine(input_ids=step, attention_mask=full, past_key_values=past, use_cache=True)
            past, step = out.past_key_values, out.logits[:, -1:].argmax(-1)

    decode_s = best_seconds(decode, seconds, least=2) / new

    def generate(tokens: int):
        config = {"max_new_tokens": tokens, "min_new_tokens": tokens, "do_sample": False, "pad_token_id": 0}
        return lambda: engine.generate(input_ids=ids, attention_mask=mask, **config)

    # generate's per-token cost: a 1-token generate (its prefill and set-up) taken off a `new`-token one
    generate_s = best_seconds(generate(new), seconds, least=2) - best_seconds(generate(1), seconds, least=2)
    step_bytes = weight_bytes(engine) + kv_bytes(engine, rows, prompt + new // 2, dtype)
    step_flops = forward_flops(engine, rows, rows)
    return {
        "prefill": (prefill_s, forward_flops(engine, rows * prompt, rows), weight_bytes(engine)),
        "decode, model step": (decode_s, step_flops, step_bytes),
        "decode, HF generate": (max(generate_s, 1e-9) / (new - 1), step_flops, step_bytes),
    }


def learner_phases(learner, engine, rows: int, length: int, seconds: float) -> dict[str, tuple[float, float, float]]:
    """{phase: (seconds, flops, bytes)}: forward+backward over rows x length tokens (logits at every
    column), the fused AdamW step, and the weight sync into `engine`."""
    ids = prompts(rows, length, learner.config.vocab_size, seed=1)
    params = [p for p in learner.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-6, fused=True)

    def forward_backward():
        learner.zero_grad(set_to_none=True)
        logits = learner(input_ids=ids, use_cache=False).logits.float()  # the loss reads float32 (policy.py)
        torch.log_softmax(logits, -1)[..., 0].mean().backward()

    fb_s = best_seconds(forward_backward, seconds, least=2)
    optimizer_s = best_seconds(optimizer.step, seconds)
    n = sum(p.numel() for p in params)
    # AdamW reads parameter, gradient, both moments and writes parameter and moments, float32 each
    sync = {name: p.detach() for name, p in learner.named_parameters()}
    sync_s = best_seconds(lambda: load_named_tensors(engine, sync), seconds)
    return {
        "learner fwd+bwd": (fb_s, 3 * forward_flops(learner, rows * length, rows * length), weight_bytes(learner)),
        "optimizer (AdamW)": (optimizer_s, 0.0, 28.0 * n),
        "weight sync": (sync_s, 0.0, weight_bytes(learner) + weight_bytes(engine)),
    }


def phase_rows(model, mode: str, sizes: dict[str, int], seconds: float) -> list[dict]:
    """Every phase of one precision mode (`float32` or `bf16`): seconds, flops, bytes moved."""
    learner = copy.deepcopy(model).float().eval()
    if mode == "bf16":  # training.mixed_precision=bf16 on one learner: float32 masters, autocast
        autocast_forward(learner, TrainingConfig(mixed_precision="bf16"), torch.device("cpu"))
    engine = copy.deepcopy(model).to(torch.float32 if mode == "float32" else torch.bfloat16).eval()
    s = sizes
    phases = engine_phases(engine, s["rows"], s["prompt"], s["new"], seconds)
    phases |= learner_phases(learner, engine, s["train_rows"], s["train_length"], seconds)
    return [{"mode": mode, "phase": k, "s": sec, "flops": f, "bytes": b} for k, (sec, f, b) in phases.items()]


def against_peaks(rows: list[dict], peaks: dict[str, float]) -> list[dict]:
    """Each row with its roofline: the least time its flops (at the matmul peak of its mode) and its
    bytes (at the best bandwidth) allow, the limit that sets it, and that time as a fraction of
    the measured one (1.0: at the machine's limit)."""
    out = []
    for r in rows:
        compute_s = r["flops"] / (peaks[r["mode"]] * 1e9)
        memory_s = r["bytes"] / (peaks["GB/s"] * 1e9)
        bound = "matmul" if compute_s >= memory_s else "memory"
        out.append(r | {"bound": bound, "fraction": max(compute_s, memory_s) / r["s"]})
    return out


@torch.no_grad()
def logprob_gaps(model, tokenizer, rows: int, prompt: int, new: int) -> dict[str, tuple[float, float]]:
    """{layout: (mean, largest) |engine - learner| logprob per generated token}: the HF engine samples
    `new` tokens (temperature 1) after random prompts, the learner recomputes their logprobs as an
    update does (relay/update/policy.py). float32 both; bf16 engine weights against the autocast
    learner (separate actors, model.dtype=bfloat16); one module under autocast (colocated)."""
    from relay.engines.base import SamplingParams
    from relay.engines.hf import HFEngine
    from relay.types import Batch, Sample
    from relay.update.policy import compute_logprobs
    from relay.update.precision import compute_precision

    bf16 = TrainingConfig(mixed_precision="bf16")
    cpu = torch.device("cpu")
    learner = autocast_forward(copy.deepcopy(model).float().eval(), bf16, cpu)
    layouts = {
        "float32": (model, model, contextlib.nullcontext()),
        "bf16 engine, autocast learner": (copy.deepcopy(model).to(torch.bfloat16), learner, contextlib.nullcontext()),
        "colocated autocast": (learner, learner, compute_precision(bf16, cpu)),
    }
    ids = prompts(rows, prompt, model.config.vocab_size, seed=2).tolist()
    out = {}
    for name, (engine_model, learner_model, context) in layouts.items():
        engine = HFEngine.sharing(engine_model.eval(), tokenizer)
        with context:
            done = engine.generate(ids, SamplingParams(max_tokens=new, seed=0))
        samples = [
            Sample(
                prompt_ids=p, response_ids=c.token_ids, loss_mask=[1] * len(c.token_ids), rollout_logprobs=c.logprobs
            )
            for p, (c,) in zip(ids, done)
        ]
        batch = Batch.from_samples(samples, pad_id=tokenizer.pad_token_id or 0)
        gap = (batch.rollout_logprobs - compute_logprobs(learner_model, batch, 1.0)).abs() * batch.loss_mask
        out[name] = (float(gap.sum() / batch.loss_mask.sum()), float(gap.max()))
    return out


def peaks_line(peaks: dict[str, float]) -> str:
    return (
        f"peaks: matmul 2048^3 float32 {peaks['float32']:.0f} GFLOP/s, bf16 {peaks['bf16']:.0f} GFLOP/s; "
        f"bandwidth copy {peaks['copy GB/s']:.1f} GB/s, triad {peaks['triad GB/s']:.1f} GB/s, "
        f"in-place add {peaks['in-place GB/s']:.1f} GB/s"
    )


TABLE_HEAD = "| mode | phase | seconds | GFLOP/s | GB/s | bound by | of the bound |\n|---|---|---:|---:|---:|---|---:|"


def table_rows(rows: list[dict]) -> str:
    return "\n".join(
        f"| {r['mode']} | {r['phase']} | {r['s']:.4f} | {r['flops'] / r['s'] / 1e9:.1f} | {r['bytes'] / r['s'] / 1e9:.1f} "
        f"| {r['bound']} | {r['fraction']:.0%} |"
        for r in rows
    )


def table(peaks: dict[str, float], rows: list[dict]) -> str:
    return "\n".join([peaks_line(peaks), "", TABLE_HEAD, table_rows(rows)])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m", help="model.path: smollm2-135m, tiny, or a folder")
    p.add_argument("--threads", type=int, default=2, help="torch threads, as the run's actors set them")
    p.add_argument("--seconds", type=float, default=1.5, help="time spent on each measurement")
    p.add_argument("--rows", type=int, default=8, help="engine rows (a GRPO step's prompts x samples)")
    p.add_argument("--prompt", type=int, default=32, help="prompt tokens per engine row")
    p.add_argument("--new", type=int, default=16, help="decoded tokens per row")
    p.add_argument("--train-rows", type=int, default=4)
    p.add_argument("--train-length", type=int, default=64)
    p.add_argument("--modes", nargs="*", default=["float32", "bf16"], help="none: only the peaks (and --gap)")
    p.add_argument("--gap", action="store_true", help="also the engine/learner logprob gap of each layout")
    p.add_argument(
        "--attn", choices=["sdpa", "eager", "eager_grouped"], help="model.attn_implementation (default: the library's)"
    )
    p.add_argument(
        "--random-weights", action="store_true", help="the model's shape from its config.json alone (timing only)"
    )
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    from relay.models.loading import load_model
    from relay.models.resolve import model_folder

    if "bf16" in a.modes and (why := bf16_unsupported(torch.device("cpu"))):  # an AVX2-only CPU, for one
        print(f"roofline: bf16 left out: {why}", flush=True)
        a.modes, a.gap = [m for m in a.modes if m != "bf16"], False  # the gap compares bf16 layouts
    peaks = machine_peaks(a.seconds)
    print("at the start:", peaks_line(peaks), flush=True)  # each part as it comes: a busy machine may stop a long run
    if a.random_weights:  # where the weights are not at hand: every phase times a fixed number of tokens
        from transformers import AutoConfig, AutoModelForCausalLM

        from relay.models.attention import register_eager_grouped

        register_eager_grouped()
        torch.manual_seed(0)
        config = AutoConfig.from_pretrained(model_folder(a.model))
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation=a.attn)
    else:
        model = load_model(model_folder(a.model), "float32", attn_implementation=a.attn)
    total, body, head = parameter_counts(model)
    print(
        f"{a.model}: {total / 1e6:.1f}M parameters ({body / 1e6:.1f}M per token + {head / 1e6:.1f}M projection), "
        f"{a.threads} threads, attention {a.attn or 'sdpa'}",
        flush=True,
    )
    sizes = {
        "rows": a.rows,
        "prompt": a.prompt,
        "new": a.new,
        "train_rows": a.train_rows,
        "train_length": a.train_length,
    }
    rows = []
    for mode in a.modes:
        rows += phase_rows(model, mode, sizes, a.seconds)
        print(table_rows(against_peaks(rows[-6:], peaks)), flush=True)
    # measured again at the end, the best of both kept: another process's burst lowers a peak
    end = machine_peaks(a.seconds)
    peaks = {k: max(v, end[k]) for k, v in peaks.items()}
    print("\n" + table(peaks, against_peaks(rows, peaks)))
    if a.gap:
        from relay.models.loading import load_tokenizer

        gaps = logprob_gaps(model, load_tokenizer(model_folder(a.model)), a.rows, a.prompt, a.new)
        print("\n| engine / learner | mean gap | largest |\n|---|---:|---:|")
        print("\n".join(f"| {k} | {mean:.2e} | {top:.2e} |" for k, (mean, top) in gaps.items()))


if __name__ == "__main__":
    main()
