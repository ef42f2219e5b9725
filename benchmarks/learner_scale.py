"""The sharded learner's update on CPU: seconds per step and memory per rank, 1 vs N ranks.

A Qwen2 model of a real shape (default: Qwen2.5-0.5B's) built locally from a config with random
weights, in fp32 or bf16, sharded with FSDP2 over gloo (relay/update/fsdp.py) and trained by relay's own
update loop (relay/update/loop.py: each rank takes its share of the batch) with AdamW. Each rank is
a process started here (torch.multiprocessing), as a rank actor would be, without Ray. Prints a
table; numbers, never assertions.

    python benchmarks/learner_scale.py [--ranks 1 2] [--dtypes float32 bfloat16] [--rows 4] [--tokens 64]

Per rank: `state GB` is parameters + gradients + AdamW state held by that rank (exact, from the
tensors), `peak RSS GB` the process's peak resident memory over the timed steps (reset after the
model was built and sharded, so the one full copy each rank builds first is not counted).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

SHAPES = {  # Qwen2.5 configs' shapes (tied embeddings as in the released 0.5B and 1.5B)
    "0.5b": dict(
        hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2
    ),
    "1.5b": dict(
        hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2
    ),
}


def _peak_rss_gb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20
    return float("nan")


def _local_bytes(tensors) -> int:
    return sum((t.to_local() if hasattr(t, "to_local") else t).nbytes for t in tensors if t is not None)


def _rank(rank: int, world: int, port: int, args: dict, out: str) -> None:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from relay.config import TrainingConfig
    from relay.types import Batch, Sample
    from relay.update.fsdp import init_rank_group, shard_model
    from relay.update.loop import run_update
    from relay.update.policy import response_logprobs

    torch.set_num_threads(args["threads"])
    torch.manual_seed(0)
    init_rank_group("127.0.0.1", port, rank, world, "gloo", "127.0.0.1")
    dtype = getattr(torch, args["dtype"])
    config = Qwen2Config(vocab_size=151936, tie_word_embeddings=True, **SHAPES[args["shape"]])
    model = Qwen2ForCausalLM(config).to(dtype).eval()
    training = TrainingConfig(micro_batch_size=args["rows"], grad_clip=1.0)
    shard_model(model, training, torch.device("cpu"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    g = torch.Generator().manual_seed(1)
    samples = [
        Sample(
            prompt_ids=torch.randint(0, 151936, (args["tokens"] // 2,), generator=g).tolist(),
            response_ids=torch.randint(0, 151936, (args["tokens"] // 2,), generator=g).tolist(),
            loss_mask=[1] * (args["tokens"] // 2),
            rollout_logprobs=[0.0] * (args["tokens"] // 2),
            group_id=i,
        )
        for i in range(args["rows"])
    ]
    batch = Batch.from_samples(samples, pad_id=0)

    def loss_fn(micro):  # the response tokens' negative log-likelihood, token-mean
        logprobs, _ = response_logprobs(model, micro, 1.0)
        loss = -(logprobs * micro.loss_mask).sum() / micro.loss_mask.sum()
        return loss, {"loss": float(loss.detach())}

    Path(f"/proc/{os.getpid()}/clear_refs").write_text("5")  # peak RSS from here on
    seconds = []
    for _ in range(args["steps"] + 1):  # the first step allocates the optimizer state: not timed
        dist.barrier()
        start = time.perf_counter()
        run_update(model, optimizer, batch, loss_fn, training, seed=0, rank=rank, world_size=world)
        seconds.append(time.perf_counter() - start)
    params = list(model.parameters())
    state = _local_bytes(params) + _local_bytes(p.grad for p in params)
    state += _local_bytes(t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t) and t.dim())
    result = {"seconds": seconds[1:], "state_gb": state / 2**30, "peak_rss_gb": _peak_rss_gb()}
    Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def measure(world: int, args: dict) -> list[dict]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as out:
        mp.start_processes(_rank, args=(world, port, args, out), nprocs=world, start_method="spawn")
        return [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(world)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="0.5b", choices=sorted(SHAPES))
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--rows", type=int, default=4, help="rows per step (the whole batch, shared by the ranks)")
    parser.add_argument("--tokens", type=int, default=64, help="tokens per row (half prompt, half response)")
    parser.add_argument("--steps", type=int, default=2, help="timed steps (after one untimed)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    a = parser.parse_args()
    print(
        f"Qwen2 {a.shape} shape, random weights, {a.rows} x {a.tokens} tokens per step, {a.threads} thread(s) per rank"
    )
    print(f"{'dtype':<9} {'ranks':>5} {'update s/step':>14} {'state GB/rank':>14} {'peak RSS GB/rank':>17}")
    for dtype in a.dtypes:
        for world in a.ranks:
            args = dict(shape=a.shape, dtype=dtype, rows=a.rows, tokens=a.tokens, steps=a.steps, threads=a.threads)
            ranks = measure(world, args)
            step = statistics.median(max(r["seconds"][i] for r in ranks) for i in range(a.steps))
            state = max(r["state_gb"] for r in ranks)
            rss = max(r["peak_rss_gb"] for r in ranks)
            print(f"{dtype:<9} {world:>5} {step:>14.2f} {state:>14.2f} {rss:>17.2f}", flush=True)


if __name__ == "__main__":
    main()
