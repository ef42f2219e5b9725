"""Weight-sync seconds learner -> rollout workers: shared memory, object store, collective broadcast.

    python benchmarks/weight_sync.py [--model tiny|qwen05b] [--workers 1 2] [--engine hf] [--repeats 5]

Real actors (relay_trainer/pools.py): one Learner, N RolloutWorkers, the transport chosen by
resources.weight_sync. One sync = relay_trainer/weights.py:sync_weights, end to end as the driver calls
it: shared memory (resources.weight_sync=object_store, workers on the learner's node) = the learner
copies its weights into a /dev/shm buffer the workers mapped at start, every worker copies them
out; object store (the same setting for workers on other nodes; here forced for comparison) =
learner.get_weights (state dict -> numpy, tied weights once) + put + every worker reads and loads;
broadcast = the learner packs byte buckets and broadcasts them (gloo on CPU, NCCL between whole
GPUs), every worker unpacks and loads. Median of --repeats after one warm-up, the shared-memory
and object-store rows taking turns sync by sync so a busy machine slows them alike.
"qwen05b" is a Qwen2.5-0.5B-shaped random model in bf16 (494M parameters, tied embeddings).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.rollout_throughput import build_model  # noqa: E402


def bench(model_path: str, dtype: str, engine: str, workers: int, transport: str, repeats: int, gpus: float) -> dict:
    """{row: result}; object_store gives two rows, shared memory and the object store itself."""
    import ray

    from relay.config import Config, ModelConfig, ResourcesConfig, RoleResources, RolloutConfig
    from relay_trainer.pools import actor_pools
    from relay_trainer.weights import sync_weights

    cfg = Config(
        model=ModelConfig(path=model_path, dtype=dtype),
        rollout=RolloutConfig(engine=engine),
        resources=ResourcesConfig(
            rollout=RoleResources(count=workers, cpus=1, gpus=gpus),
            learner=RoleResources(cpus=1, gpus=gpus),
            weight_sync=transport,
        ),
    )
    with actor_pools(cfg, model_path, f"bench-{transport}-{workers}") as actors:
        state_bytes = ray.get(actors.learner.get_weights.remote()).nbytes
        peak_before = max(ray.get([w.peak_memory_mb.remote() for w in actors.rollout]))
        sync_weights(actors, version=1)  # warm-up (first broadcast also opens connections)
        rows = {transport: actors.shared_weights}
        if any(actors.shared_weights):
            rows = {"shared_memory": actors.shared_weights, "object_store": [False] * workers}
        times, version = {row: [] for row in rows}, 1
        for _ in range(repeats):
            for row, shared in rows.items():
                actors.shared_weights, version = shared, version + 1
                t0 = time.perf_counter()
                sync_weights(actors, version=version)
                times[row].append(time.perf_counter() - t0)
        versions = ray.get([w.weight_version.remote() for w in actors.rollout])
        assert versions == [version] * workers, versions
        peak_growth = max(ray.get([w.peak_memory_mb.remote() for w in actors.rollout])) - peak_before
    return {
        row: {"seconds": statistics.median(t), "object_store_bytes": state_bytes, "peak_growth_mb": peak_growth}
        for row, t in times.items()
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=["tiny", "qwen05b"], default="tiny")
    ap.add_argument("--engine", default="hf")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()

    import ray
    import torch

    cuda = torch.cuda.device_count()
    model_path, dtype = build_model(a.model)
    ray.init(num_cpus=max(4, os.cpu_count() or 1), include_dashboard=False, log_to_driver=False)
    rows = []
    for workers in a.workers:
        # Whole GPUs per actor where there are enough (NCCL); else none (gloo, CPU tensors).
        gpus = 1.0 if cuda >= workers + 1 else 0.0
        for transport in ("object_store", "broadcast"):
            for row, r in bench(model_path, dtype, a.engine, workers, transport, a.repeats, gpus).items():
                backend = "nccl" if gpus and row == "broadcast" else ("gloo" if row == "broadcast" else "-")
                rows.append((workers, row, backend, r))
    device = f"{cuda} GPU(s): {torch.cuda.get_device_name()}" if cuda else f"CPU, {os.cpu_count()} cores"
    print(f"\nweight sync: model={a.model} ({dtype}), engine={a.engine}, median of {a.repeats}; {device}")
    print(f"{'workers':>8} {'transport':<15}{'backend':<8}{'seconds':>9}{'state MB':>10}{'worker peak +MB':>16}")
    for workers, transport, backend, r in rows:
        print(
            f"{workers:>8} {transport:<15}{backend:<8}{r['seconds']:>9.4f}{r['object_store_bytes'] / 2**20:>10.1f}"
            f"{r['peak_growth_mb']:>16.0f}"
        )
    print(
        "state MB: the learner's state dict as every transport sends it (raw dtype bytes, tied weights once); "
        "worker peak +MB: how far the syncs raised a rollout worker's peak resident memory (the first write\n"
        "into mmapped weights included; object store and shared memory: also the shared pages it read, "
        "shared with other processes; those two rows share one run, so one number)"
    )
    ray.shutdown()


if __name__ == "__main__":
    main()
