"""Rollout tokens/s of each available engine, bare in this process vs through the RolloutWorker
Ray actor (the ratio is relay's overhead), and weight-sync seconds per engine.

    python benchmarks/rollout_throughput.py [--engines hf vllm sglang] [--model tiny|qwen05b]
                                            [--prompts 16] [--n 4] [--max-tokens 64] [--repeats 3]
                                            [--chunk 8]

Model: "tiny" is the built-in tiny Qwen2 shape with a one-step warm start (random weights, in effect), so it
rarely emits EOS and every sample runs to --max-tokens: tokens/s then measures decoding, not
how early the model stops. "qwen05b" is a Qwen2.5-0.5B-shaped random model in bf16 (CUDA only).

Bare: engine.generate on token-id prompts, in this process. Actor: ray.get(worker.rollout(rows))
on a RolloutWorker actor holding the same engine, which adds prompt encoding (chat template),
Sample records, response decoding and the Ray round trip. Both use the same thread count, the
same sampling (n, temperature 1, the worker's seed) and are timed after one warm-up call; the
number is the median of --repeats calls. Weight sync: engine.update_weights with the tensors of
the WeightPayload the Learner sends (bare), and put-once + worker.update_weights through Ray
(actor, end to end, including the object-store read). --chunk N (rollout.partial): also the bare
call generated N new tokens per request/generate (`generate(chunk=N, between=no-op)`), and its time
against the unchunked call's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def available_engines(cuda: bool) -> list[str]:
    """The registry's engines that can start here (relay/config/engine_registry.py)."""
    from relay.config import ENGINES, engine_import_error

    return [n for n, e in ENGINES.items() if engine_import_error(n) is None and (cuda or not e.can.gpu_only)]


def build_model(kind: str) -> tuple[str, str]:
    """(model folder, dtype)."""
    if kind == "tiny":
        # Untrained weights: answers run to max_tokens, so every row generates the same length.
        from relay.models.build import save_folder
        from relay.models.tiny import TinySpec, build_tiny_model

        folder = Path(tempfile.mkdtemp(prefix="relay-bench-tiny-")) / "tiny"
        save_folder(*build_tiny_model(TinySpec(warm_start_steps=0)), folder)
        return str(folder), "float32"
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from relay.models.tokenizer import build_tiny_tokenizer

    folder = Path(tempfile.mkdtemp(prefix="relay-bench-qwen05b-"))
    tokenizer = build_tiny_tokenizer()
    config = Qwen2Config(
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).to(torch.bfloat16).save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return str(folder), "bfloat16"


def make_cfg(engine: str, model_path: str, dtype: str, a, cuda: bool):
    from relay.config import Config, ModelConfig, RolloutConfig

    kwargs = {}
    if engine == "vllm" and cuda:
        kwargs = {"gpu_memory_utilization": 0.3, "max_model_len": 1024}
    if engine == "sglang":
        kwargs = {"mem_fraction_static": 0.3, "context_length": 1024}
    return Config(
        model=ModelConfig(path=model_path, dtype=dtype),
        rollout=RolloutConfig(engine=engine, n=a.n, temperature=1.0, max_new_tokens=a.max_tokens, engine_kwargs=kwargs),
    )


def weights_of(model_path: str, dtype: str):
    """The WeightPayload the Learner puts in the object store."""
    from relay.models.loading import load_model
    from relay.weights.transfer import WeightPayload

    return WeightPayload.of(load_model(model_path, dtype).state_dict())


def median_time(fn, repeats: int) -> tuple[float, object]:
    fn()  # warm-up
    times, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def bench_bare(cfg, model_path: str, rows, a, threads: int, weights) -> dict:
    import torch

    from actors.rollout import RolloutWorker
    from relay.config.role_settings import RolloutSettings
    from relay.engines import make_engine

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    settings = RolloutSettings.of(cfg)
    engine = make_engine(settings.engine, model_path)
    start_s = time.perf_counter() - t0
    # The worker's own encoding and sampling, so both paths generate the same thing.
    worker = SimpleNamespace(settings=settings, index=0, tokenizer=engine.tokenizer)
    prompts = [RolloutWorker.encode_prompt(worker, row) for row in rows]
    sampling = RolloutWorker.sampling(worker, step=0)
    seconds, groups = median_time(lambda: engine.generate(prompts, sampling), a.repeats)
    tokens = sum(len(c.token_ids) for g in groups for c in g)
    chunked_s = None
    if a.chunk:  # same prompts and sampling, paused every a.chunk tokens (nothing loaded at the pauses)
        chunked_s, _ = median_time(
            lambda: engine.generate(prompts, sampling, chunk=a.chunk, between=lambda: None), a.repeats
        )
    sync_s, _ = median_time(lambda: engine.update_weights(weights.tensors(), 1), a.repeats)
    engine.shutdown()
    return {"tokens": tokens, "seconds": seconds, "start_s": start_s, "sync_s": sync_s, "chunked_s": chunked_s}


def bench_actor(cfg, model_path: str, rows, a, threads: int, weights, cuda: bool) -> dict:
    import ray

    from actors.rollout import RolloutWorker
    from relay.config.role_settings import RolloutSettings

    worker = (
        ray.remote(RolloutWorker)
        .options(num_cpus=threads, num_gpus=1 if cuda else 0)
        .remote(RolloutSettings.of(cfg), model_path, 0, threads)
    )
    t0 = time.perf_counter()
    ray.get(worker.weight_version.remote())
    start_s = time.perf_counter() - t0
    seconds, (samples, _) = median_time(lambda: ray.get(worker.rollout.remote(rows, 0, 0)), a.repeats)
    tokens = sum(len(s.response_ids) for s in samples)
    ref = ray.put(weights)  # as sync_weights does: put once, every worker reads it
    sync_s, _ = median_time(lambda: ray.get(worker.update_weights.remote(ref, 1)), a.repeats)
    ray.kill(worker)
    return {"tokens": tokens, "seconds": seconds, "start_s": start_s, "sync_s": sync_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engines", nargs="+", default=None, help="default: every installed engine")
    ap.add_argument(
        "--model", choices=["tiny", "qwen05b"], default=None, help="default: tiny on CPU, qwen05b with CUDA"
    )
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=0, help="also time the bare call chunked (rollout.partial_chunk)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads for the engine (bare and actor alike)")
    a = ap.parse_args()

    import ray
    import torch

    from relay.envs.arithmetic import make_rows

    cuda = torch.cuda.is_available()
    engines = a.engines or available_engines(cuda)
    model = a.model or ("qwen05b" if cuda else "tiny")
    model_path, dtype = build_model(model)
    weights = weights_of(model_path, dtype)
    rows = make_rows(a.prompts, seed=0, digits=2)
    ray.init(num_cpus=max(2, os.cpu_count() or 1), include_dashboard=False, log_to_driver=False)

    results = {}
    for name in engines:
        cfg = make_cfg(name, model_path, dtype, a, cuda)
        bare = bench_bare(cfg, model_path, rows, a, a.threads, weights)
        actor = bench_actor(cfg, model_path, rows, a, a.threads, weights, cuda)
        results[name] = (bare, actor)

    device = torch.cuda.get_device_name() if cuda else f"CPU, {os.cpu_count()} cores, {a.threads} engine thread(s)"
    print(
        f"\nrollout throughput: model={model} ({dtype}), {a.prompts} prompts x n={a.n}, max {a.max_tokens} new tokens, "
        f"median of {a.repeats}; {device}"
    )
    print(
        f"{'engine':<8}{'path':<7}{'tokens':>8}{'seconds':>10}{'tok/s':>10}{'overhead':>10}{'start s':>9}{'sync ms':>9}"
    )
    for name, (bare, actor) in results.items():
        for path, r in (("bare", bare), ("actor", actor)):
            ratio = (bare["tokens"] / bare["seconds"]) / (r["tokens"] / r["seconds"])
            print(
                f"{name:<8}{path:<7}{r['tokens']:>8}{r['seconds']:>10.3f}{r['tokens'] / r['seconds']:>10.0f}"
                f"{ratio:>9.2f}x{r['start_s']:>9.1f}{r['sync_s'] * 1e3:>9.1f}"
            )
    print(
        "overhead = bare tok/s / this path's tok/s; start s: engine construction (actor: until it answers); "
        "sync ms: one weight update (actor: put-once + ray.get of worker.update_weights)"
    )
    for name, (bare, _) in results.items():
        if bare["chunked_s"] is not None:
            print(
                f"{name}: bare call chunked (chunk {a.chunk}) {bare['chunked_s']:.3f} s vs unchunked "
                f"{bare['seconds']:.3f} s ({bare['chunked_s'] / bare['seconds']:.2f}x)"
            )
    ray.shutdown()


if __name__ == "__main__":  # vLLM spawns processes: the guard is required
    main()
