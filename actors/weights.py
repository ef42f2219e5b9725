"""Weight sync learner -> rollout workers, chosen by placement (`resources.weight_sync`).

object_store  The learner's state dict goes into Ray's object store once (numpy, read zero-copy;
              bf16 as its raw 16-bit pattern; tied weights once) and every worker loads it. Works everywhere: CPU, any
              mix of nodes. The default unless both roles hold whole GPUs.
broadcast     One collective group: the learner is rank 0, rollout worker i is rank i + 1.
              NCCL when both roles hold whole GPUs (the GPU-to-GPU path for separate pools),
              gloo otherwise (CPU: the same code path, tested in CI). The state dict travels
              as byte buckets; each worker unpacks views and hands them to its engine's
              in-place load (HF copy, vLLM reload / IPC, SGLang update_weights_from_tensor).

The groups are torch ProcessGroup objects built directly on a TCPStore, not through
`torch.distributed.init_process_group`: no default group is taken, so a learner that later runs
its own data-parallel group is unaffected, and a process can hold several groups (Tune trials).
The store listens on the learner's address only: loopback when every member shares its node.
"""
from __future__ import annotations

import datetime
import socket
import time
from dataclasses import dataclass

import warnings

import numpy as np
import ray
import torch
import torch.distributed as dist

# A broadcast waits this long for a missing member before raising (a dead worker must not hang the run).
TIMEOUT = datetime.timedelta(minutes=10)
BUCKET_BYTES = 256 << 20  # bytes per collective call: bounds the extra memory on both sides
ALIGN = 16  # every tensor starts at a multiple of this in its bucket, so dtype views are legal


def unique_tensors(state_dict: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """(the state dict without repeats, {repeated name: the name kept}). Tied weights are one
    storage under several names (lm_head.weight and embed_tokens.weight): sent once."""
    unique, aliases, first_name = {}, {}, {}
    for name, t in state_dict.items():
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), t.dtype, tuple(t.shape))
        if key in first_name:
            aliases[name] = first_name[key]
        else:
            first_name[key] = name
            unique[name] = t
    return unique, aliases


@dataclass(frozen=True)
class WeightPayload:
    """The learner's state dict as the object store carries it: numpy arrays, which Ray hands to
    every reader zero-copy (FINDINGS.md); bf16, which numpy lacks, as its raw 16-bit pattern."""
    arrays: dict[str, np.ndarray]
    bf16: frozenset[str]
    aliases: dict[str, str]

    @classmethod
    def of(cls, state_dict: dict[str, torch.Tensor]) -> "WeightPayload":
        unique, aliases = unique_tensors(state_dict)
        bf16 = frozenset(name for name, t in unique.items() if t.dtype == torch.bfloat16)
        arrays = {name: (t.detach().view(torch.uint16) if name in bf16 else t.detach()).cpu().numpy() for name, t in unique.items()}
        return cls(arrays, bf16, aliases)

    def tensors(self) -> dict[str, torch.Tensor]:
        with warnings.catch_warnings():  # arrays from the object store are read-only; engines only read them
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            out = {name: torch.from_numpy(a) for name, a in self.arrays.items()}
        out = {name: t.view(torch.bfloat16) if name in self.bf16 else t for name, t in out.items()}
        return out | {alias: out[name] for alias, name in self.aliases.items()}

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays.values())


@dataclass(frozen=True)
class TensorSlot:
    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    offset: int  # bytes into its bucket
    nbytes: int


@dataclass(frozen=True)
class BroadcastPlan:
    """Where every tensor of the state dict lies in the byte buckets. Tied weights (one storage
    under several names) travel once; `aliases` maps each extra name to the one that travels."""
    buckets: tuple[tuple[TensorSlot, ...], ...]
    bucket_bytes: tuple[int, ...]
    aliases: dict[str, str]

    @classmethod
    def of(cls, state_dict: dict[str, torch.Tensor], bucket_limit: int = BUCKET_BYTES) -> "BroadcastPlan":
        unique, aliases = unique_tensors(state_dict)
        buckets, sizes = [[]], [0]
        for name, t in unique.items():
            nbytes = t.numel() * t.element_size()
            if sizes[-1] and sizes[-1] + nbytes > bucket_limit:
                buckets.append([])
                sizes.append(0)
            buckets[-1].append(TensorSlot(name, t.dtype, tuple(t.shape), sizes[-1], nbytes))
            sizes[-1] += -(-nbytes // ALIGN) * ALIGN
        return cls(tuple(map(tuple, buckets)), tuple(sizes), aliases)


class WeightGroup:
    """One member of a broadcast group (rank 0 sends, the others receive)."""

    def __init__(self, host: str, port: int, rank: int, world_size: int, backend: str, tag: str,
                 listen_socket: socket.socket | None = None):
        self.rank, self.backend = rank, backend
        self.device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
        if rank == 0:  # the store serves on the socket we bound, so it listens where we chose
            store = dist.TCPStore(host, port, world_size, is_master=True, timeout=TIMEOUT,
                                  master_listen_fd=listen_socket.fileno(), wait_for_workers=False, use_libuv=True)
        else:
            store = dist.TCPStore(host, port, world_size, is_master=False, timeout=TIMEOUT)
        self._store = store  # rank 0's store must outlive the group
        store = dist.PrefixStore(f"relay-weights/{tag}", store)
        if backend == "nccl":
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = TIMEOUT
            self.group = dist.ProcessGroupNCCL(store, rank, world_size, options)
        else:
            options = dist.ProcessGroupGloo._Options()
            options._timeout = TIMEOUT
            options._devices = [dist.ProcessGroupGloo.create_device(hostname=local_address(host))]
            self.group = dist.ProcessGroupGloo(store, rank, world_size, options)

    def _broadcast(self, buffer: torch.Tensor) -> None:
        options = dist.BroadcastOptions()
        options.rootRank, options.rootTensor, options.timeout = 0, 0, TIMEOUT
        self.group.broadcast([buffer], options).wait()

    @torch.no_grad()
    def send(self, state_dict: dict[str, torch.Tensor], plan: BroadcastPlan) -> None:
        for slots, size in zip(plan.buckets, plan.bucket_bytes):
            buffer = torch.empty(size, dtype=torch.uint8, device=self.device)
            for s in slots:
                t = state_dict[s.name]
                if t.dtype != s.dtype or tuple(t.shape) != s.shape:
                    raise ValueError(f"weight broadcast: {s.name} is {t.dtype} {tuple(t.shape)}, the plan says {s.dtype} {s.shape}")
                buffer[s.offset:s.offset + s.nbytes].copy_(t.detach().contiguous().view(-1).view(torch.uint8))
            self._broadcast(buffer)

    @torch.no_grad()
    def receive(self, plan: BroadcastPlan) -> dict[str, torch.Tensor]:
        """The state dict as views into the received buckets (tied names share one tensor)."""
        out = {}
        for slots, size in zip(plan.buckets, plan.bucket_bytes):
            buffer = torch.empty(size, dtype=torch.uint8, device=self.device)
            self._broadcast(buffer)
            for s in slots:
                out[s.name] = buffer[s.offset:s.offset + s.nbytes].view(s.dtype).view(s.shape)
        out.update({alias: out[name] for alias, name in plan.aliases.items()})
        if self.device.type == "cuda":  # NCCL work is only queued; engines may read from another process (IPC)
            torch.cuda.current_stream(self.device).synchronize()
        return out


def local_address(peer_host: str) -> str:
    """This process's address as the group's members reach it: loopback in a one-node group."""
    return "127.0.0.1" if peer_host == "127.0.0.1" else ray.util.get_node_ip_address()


def listen(host: str) -> socket.socket:
    """A socket bound to `host` on a free port, for rank 0's store."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((host, 0))
    sock.listen(128)
    return sock


# -- actor side: mixed into Learner (sender) and RolloutWorker (receiver) --------------------


class NodeAware:
    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()


class WeightSender(NodeAware):
    """Needs `self.model`. Rank 0 of the broadcast group."""

    def listen_for_weight_group(self, one_node: bool) -> tuple[str, int, BroadcastPlan]:
        host = "127.0.0.1" if one_node else ray.util.get_node_ip_address()
        self._weight_socket = listen(host)
        self._weight_plan = BroadcastPlan.of(self.model.state_dict())
        return host, self._weight_socket.getsockname()[1], self._weight_plan

    def join_weight_group(self, host: str, port: int, world_size: int, backend: str, tag: str) -> None:
        self._weight_group = WeightGroup(host, port, 0, world_size, backend, tag, listen_socket=self._weight_socket)

    def broadcast_weights(self) -> None:
        self._weight_group.send(self.model.state_dict(), self._weight_plan)


class WeightReceiver(NodeAware):
    """Needs `self.engine`. Rank i + 1 of the broadcast group for rollout worker i."""

    def join_weight_group(self, host: str, port: int, rank: int, world_size: int, backend: str, tag: str,
                          plan: BroadcastPlan) -> None:
        self._weight_group, self._weight_plan = WeightGroup(host, port, rank, world_size, backend, tag), plan

    def receive_weights(self, version: int) -> float:
        """Receive, then load in place; returns the load's seconds."""
        weights = self._weight_group.receive(self._weight_plan)
        start = time.perf_counter()
        self.engine.update_weights(weights, version)
        return time.perf_counter() - start


# -- driver side ------------------------------------------------------------------------------


def uses_broadcast(resources) -> bool:
    """resources.weight_sync auto: broadcast when both roles hold whole GPUs (NCCL cannot put two
    ranks on one GPU, so shared GPUs go through the object store and the engine's in-place load)."""
    if resources.weight_sync != "auto":
        return resources.weight_sync == "broadcast"
    return resources.learner.gpus >= 1 and resources.rollout.gpus >= 1


def broadcast_backend(resources) -> str:
    return "nccl" if resources.learner.gpus >= 1 and resources.rollout.gpus >= 1 else "gloo"


def open_broadcast(learner, workers: list, backend: str, tag: str) -> None:
    """Form the group: the learner binds its address and a free port, then every member joins at once."""
    nodes = ray.get([learner.node_id.remote(), *[w.node_id.remote() for w in workers]])
    host, port, plan = ray.get(learner.listen_for_weight_group.remote(one_node=len(set(nodes)) == 1))
    world = len(workers) + 1
    ray.get([learner.join_weight_group.remote(host, port, world, backend, tag),
             *[w.join_weight_group.remote(host, port, i + 1, world, backend, tag, plan) for i, w in enumerate(workers)]])


def sync_weights(actors, version: int) -> float:
    """The learner's weights to every rollout worker, tagged `version`; returns the seconds it took."""
    start = time.perf_counter()
    learner, workers = actors.learner, actors.rollout
    if actors.weight_broadcast:
        ray.get([learner.broadcast_weights.remote(), *[w.receive_weights.remote(version) for w in workers]])
    else:  # put once (the learner's return value stays in the object store), every worker reads it
        weights = learner.get_weights.remote()
        ray.get([w.update_weights.remote(weights, version) for w in workers])
    return time.perf_counter() - start
