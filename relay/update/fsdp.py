"""One role (learner, reference, critic) as a group of data-parallel ranks with FSDP2 inside.

PyTorch's own engine: `torch.distributed.fsdp.fully_shard` over a one-dimensional DeviceMesh,
each decoder layer one FSDP unit and the root another, so a rank holds its shard of every
parameter, gradient and optimizer state and all-gathers one layer at a time. Gloo on CPU, NCCL on
GPUs. The group is the process's default torch.distributed group; the learner -> rollout weight
group is a separate one (relay/weights/transfer.py) and never the default.

Every rank holds the whole batch and takes its share of the rows (`share_rows`); results go
back to rank 0 (`gather_rows`), which answers the driver.
"""

from __future__ import annotations

import datetime
import functools
import json
import socket
from pathlib import Path

import torch
import torch.distributed as dist
import torch.utils.checkpoint
from safetensors.torch import save_file
from torch.distributed.device_mesh import init_device_mesh

from relay.config import ModelConfig, TrainingConfig
from relay.types import Batch
from relay.weights.transfer import BroadcastPlan, full, gather_as_peer

# Bytes of full tensors per file of a Hugging Face folder written by a rank group: also what each
# rank holds at once while writing it.
HF_SHARD_BYTES = 1 << 30
# A rank waits this long for a missing peer before raising (a dead rank must not hang the run).
TIMEOUT = datetime.timedelta(minutes=10)


def init_rank_group(
    host: str,
    port: int,
    rank: int,
    world_size: int,
    backend: str,
    local_host: str,
    listen_socket: socket.socket | None = None,
) -> None:
    """Join the group as its default torch.distributed group. host:port is rank 0's store (rank 0
    passes the socket it bound there); local_host is this rank's own address, where gloo listens."""
    if rank == 0:  # serves on the socket rank 0 bound (else it binds host:port itself)
        bound = {"master_listen_fd": listen_socket.fileno()} if listen_socket is not None else {}
        store = dist.TCPStore(
            host, port, world_size, is_master=True, timeout=TIMEOUT, wait_for_workers=False, use_libuv=True, **bound
        )
    else:
        store = dist.TCPStore(host, port, world_size, is_master=False, timeout=TIMEOUT)
    options = None
    if backend == "gloo":  # gloo listens on the address given, not whatever the host name resolves to
        options = dist.ProcessGroupGloo._Options()
        options._timeout = TIMEOUT
        options._devices = [dist.ProcessGroupGloo.create_device(hostname=local_host)]
    dist.init_process_group(
        backend,
        store=dist.PrefixStore("relay-ranks", store),
        rank=rank,
        world_size=world_size,
        timeout=TIMEOUT,
        pg_options=options,
    )


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated blocks of a transformers model (the classes it names in `_no_split_modules`)."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(f"{type(model).__name__} names no decoder layer class (_no_split_modules): cannot shard it")
    return layers


def checkpoint_activations(model: torch.nn.Module) -> None:
    """Each decoder layer keeps only its inputs in the forward pass and recomputes the rest in the
    backward pass (torch.utils.checkpoint, non-reentrant: works under FSDP2 and in eval mode,
    where transformers' own gradient checkpointing switches itself off)."""
    for layer in decoder_layers(model):
        layer.forward = functools.partial(_checkpointed, layer.forward)


def _checkpointed(forward, *args, **kwargs):
    return torch.utils.checkpoint.checkpoint(forward, *args, use_reentrant=False, **kwargs)


def shard_model(model: torch.nn.Module, training: TrainingConfig, device: torch.device) -> torch.nn.Module:
    """fully_shard every decoder layer, then the root, over all ranks of the default group.

    mixed_precision bf16: parameters all-gathered and computed in bf16, gradients reduced and
    master weights kept in fp32 (load the model in fp32). cpu_offload: shards, gradients and
    optimizer state live on the host between uses (GPU ranks only).
    """
    # Imported here: torch.distributed.fsdp takes seconds and ~40 MB (sympy, torch.fx), which an
    # unsharded learner and the driver, both importing this module, would pay for nothing.
    from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    options = {"mesh": mesh}
    if training.mixed_precision == "bf16":
        options["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    if training.cpu_offload and device.type == "cuda":
        options["offload_policy"] = CPUOffloadPolicy()
    for layer in decoder_layers(model):
        fully_shard(layer, **options)
    fully_shard(model, **options)
    assert isinstance(model, FSDPModule)
    return model


def share_rows(batch: Batch) -> tuple[Batch, bool]:
    """This rank's rows of `batch` (consecutive shares, rank order) and whether it has any. A
    rank without rows gets row 0 to compute and drop: FSDP pairs every rank's forward passes."""
    rank, world = dist.get_rank(), dist.get_world_size()
    rows = torch.arange(len(batch)).tensor_split(world)[rank]
    return (batch.select(rows), True) if len(rows) else (batch.select([0]), False)


def gather_rows(result: torch.Tensor, has_rows: bool) -> torch.Tensor | None:
    """Every rank's rows of a result, concatenated in rank order on rank 0 (None on the others)."""
    parts = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(result.cpu() if has_rows else None, parts, dst=0)
    return torch.cat([p for p in parts if p is not None]) if parts is not None else None


def master_dtype(model: ModelConfig, training: TrainingConfig) -> str:
    """The dtype a role loads its weights in: fp32 master weights under bf16 mixed precision."""
    return "float32" if training.mixed_precision == "bf16" else model.dtype


class HFShardWriter:
    """Stands in for the model in relay.checkpoint.atomic.save_hf_model on rank 0 of a sharded group:
    `save_pretrained` writes the config and the weights as Hugging Face sharded safetensors
    (model-0000i-of-0000n.safetensors and model.safetensors.index.json), gathering one file's
    full tensors at a time while every other rank calls gather_as_peer(state_dict, plan).
    Tied names are left out: transformers ties them again on load."""

    def __init__(self, model: torch.nn.Module, state_dict: dict[str, torch.Tensor], plan: BroadcastPlan):
        self.model, self.state_dict, self.plan = model, state_dict, plan

    def save_pretrained(self, folder: str | Path) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.model.config.save_pretrained(folder)
        if getattr(self.model, "generation_config", None) is not None:
            self.model.generation_config.save_pretrained(folder)
        count, weight_map, total = len(self.plan.buckets), {}, 0
        for i, slots in enumerate(self.plan.buckets):
            name = f"model-{i + 1:05d}-of-{count:05d}.safetensors"
            tensors = {s.name: full(self.state_dict[s.name]).cpu().contiguous() for s in slots}
            save_file(tensors, str(folder / name), metadata={"format": "pt"})
            weight_map.update(dict.fromkeys(tensors, name))
            total += sum(s.nbytes for s in slots)
            del tensors  # one file's tensors at a time
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2), encoding="utf-8")


def save_hf_sharded(model: torch.nn.Module, folder: str | Path, tokenizer) -> None:
    """Every rank calls this: rank 0 writes the Hugging Face folder (atomically, with the tokenizer
    it was given), the others take part in gathering each full tensor."""
    from relay.checkpoint.atomic import save_hf_model

    state_dict = model.state_dict(keep_vars=True)
    plan = BroadcastPlan.of(state_dict, bucket_limit=HF_SHARD_BYTES)
    if dist.get_rank() == 0:
        save_hf_model(HFShardWriter(model, state_dict, plan), tokenizer, folder)
    else:
        gather_as_peer(state_dict, plan)
    dist.barrier()
