"""A LoRA learner as a rank group without Ray (the FSDP tests' way: spawned processes that join one
gloo group), for tests/unit/test_lora_fsdp.py."""

from __future__ import annotations

import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from relay.config import load_config
from relay.config.role_settings import PolicySettings
from relay.models.lora import engine_state_dict
from relay.weights.transfer import full
from tests.fsdp_ranks import SAVE_AFTER, STEPS, free_port, step_batch, the_ranks_forward
from tests.fsdp_ranks import train as train_role

OVERRIDES = [
    "model.lora.rank=8",
    "model.lora.alpha=16",
    "checkpoint.save_merged=true",
    "training.mini_batches=2",
    "training.micro_batch_size=2",
    "training.lr=5e-3",
]


def trained(learner, folder: Path, steps: range, save: bool, rank: int = 0) -> dict | None:
    """Train; then (every rank) gather the adapters, the merged weights and write the final folder."""
    out = train_role(learner, steps, folder / "checkpoint" if save else None)
    out["adapters"] = {k: full(v).clone() for k, v in learner.model.state_dict(keep_vars=True).items() if ".lora_" in k}
    out["merged"] = {k: v.clone() for k, v in engine_state_dict(learner.model, keep_vars=True).items()}
    learner.save_hf(str(folder / "final_model"), learner.model_path)
    out["ref"] = learner.compute_ref_logprobs(step_batch(99))
    return out if rank == 0 else None


def _rank_main(rank: int, world: int, port: int, model_path: str, folder: str) -> None:
    from actors.learner import Learner

    torch.set_num_threads(1)
    learner = Learner(PolicySettings.of(load_config(None, OVERRIDES)), model_path, num_threads=1)
    learner.model_path = model_path
    learner.join_rank_group("127.0.0.1", port, rank, world, "gloo")
    out = trained(learner, Path(folder), range(1, STEPS + 1), save=True, rank=rank)
    dist.destroy_process_group()
    if rank == 0:
        torch.save(out, Path(folder) / "results.pt")


def run_lora_ranks(world: int, model_path: str, folder: Path, timeout_s: float = 600) -> dict:
    ctx = mp.start_processes(
        _rank_main, args=(world, free_port(), model_path, str(folder)), nprocs=world, join=False, start_method="spawn"
    )
    deadline = time.monotonic() + timeout_s
    try:
        while not ctx.join(timeout=5):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{world} ranks did not finish in {timeout_s} s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
    return torch.load(folder / "results.pt")


def one_process(model_path: str, folder: Path, checkpoint: Path | None = None) -> dict:
    """The same steps on one LoRA Learner; from a sharded checkpoint's step when given."""
    from actors.learner import Learner

    learner = Learner(PolicySettings.of(load_config(None, OVERRIDES)), model_path, num_threads=1)
    learner.model_path = model_path
    with the_ranks_forward():
        if checkpoint is None:
            return trained(learner, folder, range(1, STEPS + 1), save=False)
        learner.load_shards(str(checkpoint))
        return trained(learner, folder, range(SAVE_AFTER + 1, STEPS + 1), save=False)
