"""LoRA vs full fine-tuning in the Learner: trainable parameters and learner memory, one run.

A Qwen2 model of a real shape built locally from a config with random weights (saved to a
temporary folder, loaded by the Learner as any model.path), trained by relay's Learner class
itself (actors/learner.py: the same optimizer, update loop and LoRA wrapping as in a run) on a
fixed batch, once with full fine-tuning and once with model.lora.rank = R. Each mode runs in a
process of its own (spawned), so one's memory never counts for the other. Prints a table;
numbers, never assertions.

    python benchmarks/lora_memory.py [--shape small|0.5b] [--rank 8] [--rows 8] [--tokens 128]

`trainable` is the fraction of parameters the optimizer steps; `state GB` the parameters +
gradients + AdamW state the learner holds (exact, from the tensors); `peak RSS GB` the process's
peak resident memory over the update steps (reset once the Learner was built, so it counts the
weights, what training adds, and the libraries); on a GPU, `peak GPU GB` is torch's
max_memory_allocated over the same steps.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from relay.config.role_settings import PolicySettings

SHAPES = {
    # a small Qwen2 that fits beside other work on a laptop (about 40M parameters)
    "small": dict(
        vocab_size=32000,
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=2,
    ),
    # Qwen2.5-0.5B's shape (tied embeddings, as released)
    "0.5b": dict(
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
    ),
}


def _peak_rss_gb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20
    return float("nan")


def _bytes(tensors) -> int:
    return sum(t.nbytes for t in tensors if t is not None)


def _mode(_index: int, rank: int, model_dir: str, args: dict, out: str) -> None:
    from actors.learner import Learner
    from relay.config import load_config
    from relay.models.lora import trainable_fraction
    from relay.types import Batch, Sample

    overrides = [f"model.lora.rank={rank}", "training.lr=1e-4", f"training.micro_batch_size={args['rows']}"]
    learner = Learner(PolicySettings.of(load_config(None, overrides)), model_dir, num_threads=args["threads"])
    vocab = learner.model.config.vocab_size
    g = torch.Generator().manual_seed(1)
    half = args["tokens"] // 2
    samples = [
        Sample(
            prompt_ids=torch.randint(3, vocab, (half,), generator=g).tolist(),
            response_ids=torch.randint(3, vocab, (half,), generator=g).tolist(),
            rollout_logprobs=[0.0] * half,
            loss_mask=[1] * half,
            reward=float(i % 2),
            group_id=i // 2,
        )
        for i in range(args["rows"])
    ]
    batch = Batch.from_samples(samples, pad_id=0)
    batch.advantages = torch.randn(batch.loss_mask.shape, generator=g) * batch.loss_mask
    cuda = learner.device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    Path(f"/proc/{os.getpid()}/clear_refs").write_text("5")  # peak RSS from here on
    seconds = []
    for _ in range(args["steps"] + 1):  # the first step allocates the optimizer state: not timed
        batch.old_logprobs = learner.compute_logprobs(batch)
        start = time.perf_counter()
        learner.update(batch)
        seconds.append(time.perf_counter() - start)
    params = list({id(p): p for p in learner.model.parameters()}.values())
    state = _bytes(params) + _bytes(p.grad for p in params)
    state += _bytes(t for s in learner.optimizer.state.values() for t in s.values() if torch.is_tensor(t) and t.dim())
    result = {
        "trainable": trainable_fraction(learner.model),
        "trainable_params": sum(p.numel() for p in params if p.requires_grad),
        "params": sum(p.numel() for p in params),
        "state_gb": state / 2**30,
        "peak_rss_gb": _peak_rss_gb(),
        "peak_gpu_gb": torch.cuda.max_memory_allocated() / 2**30 if cuda else float("nan"),
        "seconds": sorted(seconds[1:])[len(seconds[1:]) // 2],
    }
    Path(out, "result.json").write_text(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="small", choices=sorted(SHAPES))
    parser.add_argument("--rank", type=int, default=8, help="model.lora.rank of the LoRA run")
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=128, help="tokens per row (half prompt, half response)")
    parser.add_argument("--steps", type=int, default=2, help="timed steps (after one untimed)")
    parser.add_argument("--threads", type=int, default=1)
    a = parser.parse_args()
    from transformers import Qwen2Config, Qwen2ForCausalLM

    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        model_dir = str(Path(tmp, "model"))
        Qwen2ForCausalLM(Qwen2Config(tie_word_embeddings=True, **SHAPES[a.shape])).save_pretrained(model_dir)
        args = dict(rows=a.rows, tokens=a.tokens, steps=a.steps, threads=a.threads)
        results = {}
        for rank in (0, a.rank):
            mp.start_processes(_mode, args=(rank, model_dir, args, tmp), nprocs=1, start_method="spawn")
            results[rank] = json.loads(Path(tmp, "result.json").read_text())
    print(f"Qwen2 {a.shape} shape, random weights, fp32, {a.rows} x {a.tokens} tokens per update, AdamW")
    print(
        f"{'mode':<14} {'trainable':>10} {'trainable n':>12} {'state GB':>9} {'peak RSS GB':>12} {'peak GPU GB':>12} {'s/update':>9}"
    )
    for rank, r in results.items():
        mode = "full" if rank == 0 else f"LoRA r={rank}"
        print(
            f"{mode:<14} {r['trainable']:>10.4f} {r['trainable_params']:>12,} {r['state_gb']:>9.3f} "
            f"{r['peak_rss_gb']:>12.3f} {r['peak_gpu_gb']:>12.3f} {r['seconds']:>9.2f}"
        )
    full, lora = results[0], results[a.rank]
    print(
        f"LoRA / full: trainable {lora['trainable_params'] / full['trainable_params']:.4f}, "
        f"state {lora['state_gb'] / full['state_gb']:.3f}, peak RSS {lora['peak_rss_gb'] / full['peak_rss_gb']:.3f}"
    )


if __name__ == "__main__":
    main()
