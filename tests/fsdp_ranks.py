"""Rank groups without Ray, for the FSDP tests: N processes (torch.multiprocessing) each holding a
Learner and a Critic that join one gloo group, exactly as the rank actors do."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from unittest import mock

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from relay.config import load_config
from relay.types import Batch, Sample
from relay.weights.transfer import full

STEPS = 3
SAVE_AFTER = 2
OVERRIDES = [
    "algorithm.estimator=gae",
    "critic.enabled=true",
    "training.mini_batches=2",
    "training.micro_batch_size=2",
    "training.lr_schedule=cosine",
    "training.warmup_steps=1",
    "training.lr=2e-4",
    "critic.lr=2e-4",
]


def step_batch(step: int, rows: int = 8) -> Batch:
    """The step's rollout batch: fixed token ids, response lengths 1-4, its own group ids."""
    g = torch.Generator().manual_seed(step)
    samples = []
    for i in range(rows):
        n = 1 + (i + step) % 4
        samples.append(
            Sample(
                prompt_ids=torch.randint(3, 40, (2 + i % 3,), generator=g).tolist(),
                response_ids=torch.randint(3, 40, (n,), generator=g).tolist(),
                loss_mask=[1] * n,
                rollout_logprobs=[0.0] * n,
                reward=float(i % 2),
                group_id=100 * step + i // 2,
            )
        )
    batch = Batch.from_samples(samples, pad_id=0)
    # Mostly positive advantages: a loss that is a sum of mixed-sign terms cancels to near 0, and
    # its relative difference would measure the cancellation rather than the sharding.
    batch.advantages = ((torch.randn(batch.loss_mask.shape, generator=g) + 1.5) * batch.loss_mask).float()
    batch.returns = (torch.randn(batch.loss_mask.shape, generator=g) * batch.loss_mask).float()
    return batch


def _on_every_rank(value):
    """Rank 0's result (the group's answer to the driver) on every rank, as the driver would send it."""
    if not dist.is_initialized():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def train(role, steps: range, checkpoint: Path | None) -> dict:
    """Run the role (a Learner or a Critic) over the steps' batches; its metrics, the first step's
    forward results, and its full weights at the end."""
    out = {"metrics": {}, "forward": None}
    for step in steps:
        batch = step_batch(step)
        if hasattr(role, "compute_logprobs"):
            batch.old_logprobs = _on_every_rank(role.compute_logprobs(batch))
            forward = batch.old_logprobs
        else:
            batch.values = _on_every_rank(role.compute_values(batch))
            forward = batch.values
        out["forward"] = forward if out["forward"] is None else out["forward"]
        out["metrics"][step] = role.update(batch)
        if checkpoint is not None and step == SAVE_AFTER:
            role.save_shards(str(checkpoint))
    out["weights"] = {k: full(v).clone() for k, v in role.model.state_dict(keep_vars=True).items()}
    return out


def _rank_main(
    rank: int, world: int, ports: list[int], model_path: str, folder: str, resume: bool, overrides: list[str]
) -> None:
    from actors.critic import Critic
    from actors.learner import Learner
    from relay.config.role_settings import CriticSettings, PolicySettings

    torch.set_num_threads(1)
    cfg = load_config(None, OVERRIDES + overrides)
    folder = Path(folder)
    results = {}
    roles = (("learner", Learner, PolicySettings), ("critic", Critic, CriticSettings))
    for (name, cls, settings), port in zip(roles, ports):
        role = cls(settings.of(cfg), model_path, num_threads=1)
        role.join_rank_group("127.0.0.1", port, rank, world, "gloo")
        if resume:
            role.load_shards(str(folder / "checkpoint" / name))
            results[name] = train(role, range(SAVE_AFTER + 1, STEPS + 1), None)
        else:
            results[name] = train(role, range(1, STEPS + 1), folder / "checkpoint" / name)
        dist.destroy_process_group()
    if rank == 0:
        torch.save(results, folder / f"results-{world}-{'resume' if resume else 'fresh'}{len(overrides)}.pt")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(
    world: int, model_path: str, folder: Path, resume: bool, overrides: list[str] = (), timeout_s: float = 600
) -> dict:
    """Start `world` rank processes, wait for them (killing them after timeout_s), return rank 0's results."""
    ctx = mp.start_processes(
        _rank_main,
        args=(world, [free_port(), free_port()], model_path, str(folder), resume, list(overrides)),
        nprocs=world,
        join=False,
        start_method="spawn",
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
    return torch.load(folder / f"results-{world}-{'resume' if resume else 'fresh'}{len(overrides)}.pt")


def the_ranks_forward():
    """One process runs the forward an FSDP2 rank runs, every row's prompt in the one pass
    (relay/update/policy.py: shared_prompt_logits gives way under FSDP2), so the two differ by the
    float order of sharding alone."""
    return mock.patch("relay.update.policy.shared_prompt_logits", return_value=None)


def one_process(model_path: str, checkpoint: Path | None = None) -> dict:
    """The same steps on one Learner and one Critic, no process group (resources.*.count=1);
    from the checkpoint's step when `checkpoint` is given."""
    from actors.critic import Critic
    from actors.learner import Learner
    from relay.config.role_settings import CriticSettings, PolicySettings

    cfg = load_config(None, OVERRIDES)
    results = {}
    with the_ranks_forward():
        for name, cls, settings in (("learner", Learner, PolicySettings), ("critic", Critic, CriticSettings)):
            role = cls(settings.of(cfg), model_path, num_threads=1)
            if checkpoint is not None:
                role.load_shards(str(checkpoint / name))
                results[name] = train(role, range(SAVE_AFTER + 1, STEPS + 1), None)
            else:
                results[name] = train(role, range(1, STEPS + 1), None)
    return results


def relative_difference(a, b) -> float:
    """|a - b| / |b|, elementwise maximum over tensors (scaled by the tensor's largest |b|)."""
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    return float((a - b).abs().max() / b.abs().max().clamp(min=1e-12))
