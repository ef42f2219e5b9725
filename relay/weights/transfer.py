"""Moving a state dict from one process to many: the encodings behind relay_trainer/weights.py.

WeightPayload    numpy arrays for Ray's object store (read zero-copy by every worker); bf16, which
                 numpy lacks, as its raw 16-bit pattern; tied weights once.
BroadcastPlan    where each tensor lies in a few byte buckets: tensors of any dtype travel in one
                 collective call per bucket; tied weights once.
WeightGroup      that collective: a torch ProcessGroup (NCCL or gloo) built directly on a TCPStore
                 whose entries are signed with the run's secret (relay.weights.signed_store; gloo buckets
                 carry an HMAC as well, BucketMac),
                 not through `torch.distributed.init_process_group`. No default group is taken: a
                 learner keeps it for its own data parallelism, a process may hold several groups,
                 and vLLM's IPC weight sender (which all-gathers over the default group when one
                 exists) keeps working inside a rollout worker.
ReceivedWeights  one broadcast as a receiver reads it: a one-pass stream of (name, tensor), one
                 bucket held at a time.

A sharded learner's state dict (FSDP2: DTensor parameters, read with keep_vars=True so tied
weights are one object) works too: each full tensor is all-gathered when it is read
(`full_tensor`), so every rank of the learner must read the same tensors in the same order;
rank 0 sends or keeps them, the others call `gather_as_peer` and drop each one.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import socket
import sys
import warnings
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from relay.weights.signed_store import MAC_BYTES, SignedStore

# A broadcast waits this long for a missing member before raising (a dead worker must not hang the run).
TIMEOUT = datetime.timedelta(minutes=10)
BUCKET_BYTES = 256 << 20  # bytes per collective call: bounds the extra memory on both sides
ALIGN = 16  # every tensor starts at a multiple of this in its bucket, so dtype views are legal

def as_tensor(value) -> torch.Tensor:
    """A tensor view of a tensor or numpy array. Arrays from Ray's object store are read-only;
    engines only read them (to copy them in), so torch's not-writable warning is noise here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.as_tensor(value)



def unique_tensors(state_dict: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """(the state dict without repeats, {repeated name: the name kept}). Tied weights are one
    storage under several names (lm_head.weight and embed_tokens.weight): sent once."""
    unique, aliases, first_name = {}, {}, {}
    for name, t in state_dict.items():
        if is_dtensor(t):  # a shard (maybe empty on this rank): tied names hold the same parameter
            key = ("dtensor", id(t))
        else:
            key = (t.untyped_storage().data_ptr(), t.storage_offset(), t.dtype, tuple(t.shape))
        if key in first_name:
            aliases[name] = first_name[key]
        else:
            first_name[key] = name
            unique[name] = t
    return unique, aliases


def full(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor: all-gathered from every rank for a DTensor (a collective), else itself."""
    return t.full_tensor().detach() if is_dtensor(t) else t.detach()


def is_dtensor(t: torch.Tensor) -> bool:
    """Whether `t` is an FSDP2 shard. torch.distributed.tensor costs seconds to import (sympy,
    torch.fx); a process that never imported it (nothing sharded there) holds no DTensor."""
    module = sys.modules.get("torch.distributed.tensor")
    return module is not None and isinstance(t, module.DTensor)


def gather_as_peer(state_dict: dict[str, torch.Tensor], plan: BroadcastPlan | None = None) -> None:
    """A rank other than 0's part in rank 0's WeightPayload.of (plan None) or WeightGroup.send
    (its plan) of a sharded state dict: the same all-gathers in the same order, results dropped."""
    names = list(unique_tensors(state_dict)[0]) if plan is None else [s.name for b in plan.buckets for s in b]
    for name in names:
        full(state_dict[name])


@dataclass(frozen=True)
class WeightPayload:
    """The learner's state dict as the object store carries it: numpy arrays, which Ray hands to
    every reader zero-copy; bf16, which numpy lacks, as its raw 16-bit pattern."""

    arrays: dict[str, np.ndarray]
    bf16: frozenset[str]
    aliases: dict[str, str]

    @classmethod
    def of(cls, state_dict: dict[str, torch.Tensor]) -> WeightPayload:
        unique, aliases = unique_tensors(state_dict)
        bf16 = frozenset(name for name, t in unique.items() if t.dtype == torch.bfloat16)
        arrays = {
            name: (full(t).view(torch.uint16) if name in bf16 else full(t)).cpu().numpy() for name, t in unique.items()
        }
        return cls(arrays, bf16, aliases)

    def tensors(self) -> dict[str, torch.Tensor]:
        out = {name: as_tensor(a) for name, a in self.arrays.items()}  # zero-copy views
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
    def of(cls, state_dict: dict[str, torch.Tensor], bucket_limit: float = BUCKET_BYTES) -> BroadcastPlan:
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


@torch.no_grad()
def pack(state_dict: dict[str, torch.Tensor], slots: tuple[TensorSlot, ...], buffer: torch.Tensor) -> None:
    """Copy each slot's tensor (the full tensor of a DTensor) into its bytes of `buffer` (uint8)."""
    for s in slots:
        t = full(state_dict[s.name])
        if t.dtype != s.dtype or tuple(t.shape) != s.shape:
            raise ValueError(
                f"weight transfer: {s.name} is {t.dtype} {tuple(t.shape)}, the plan says {s.dtype} {s.shape}"
            )
        buffer[s.offset : s.offset + s.nbytes].copy_(t.contiguous().view(-1).view(torch.uint8))


def unpack(buffer: torch.Tensor, slots: tuple[TensorSlot, ...]):
    """(name, tensor) for each slot: views of `buffer` (uint8), no copies."""
    for s in slots:
        yield s.name, buffer[s.offset : s.offset + s.nbytes].view(s.dtype).view(s.shape)


class WeightGroup:
    """One member of a broadcast group (rank 0 sends, the others receive)."""

    def __init__(
        self,
        host: str,
        port: int,
        rank: int,
        world_size: int,
        backend: str,
        tag: str,
        local_host: str,
        listen_socket: socket.socket | None = None,
        *,
        secret: bytes,
    ):
        """host:port is rank 0's store (rank 0 passes the socket it bound there); local_host is
        this member's own address, where gloo listens for its peers. `secret`: the run's, which
        every member got through Ray; the store's entries are signed with it (relay.weights.signed_store)."""
        self.device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
        # gloo (CPU buckets, the transport between CPU nodes): each bucket ends in an HMAC of its bytes
        # and its number, which receivers check, so data injected into a peer connection is refused.
        # NCCL buckets stay on the GPU unsigned: hashing them would mean a copy to the host.
        self.bucket_mac = BucketMac(secret) if backend == "gloo" else None
        if rank == 0:  # the store serves on the socket we bound, so it listens where we chose
            store = dist.TCPStore(
                host,
                port,
                world_size,
                is_master=True,
                timeout=TIMEOUT,
                master_listen_fd=listen_socket.fileno(),
                wait_for_workers=False,
                use_libuv=True,
            )
        else:
            store = dist.TCPStore(host, port, world_size, is_master=False, timeout=TIMEOUT)
        self._store = store  # rank 0's store must outlive the group
        self._signed = SignedStore(store, secret)  # the C++ side holds it, this reference keeps its Python half alive
        store = dist.PrefixStore(f"relay-weights/{tag}", self._signed)
        if backend == "nccl":
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = TIMEOUT
            self.group = dist.ProcessGroupNCCL(store, rank, world_size, options)
        else:
            options = dist.ProcessGroupGloo._Options()
            options._timeout = TIMEOUT
            options._devices = [dist.ProcessGroupGloo.create_device(hostname=local_host)]
            self.group = dist.ProcessGroupGloo(store, rank, world_size, options)

    def _broadcast(self, buffer: torch.Tensor) -> None:
        options = dist.BroadcastOptions()
        options.rootRank, options.rootTensor, options.timeout = 0, 0, TIMEOUT
        self.group.broadcast([buffer], options).wait()

    @torch.no_grad()
    def send(self, state_dict: dict[str, torch.Tensor], plan: BroadcastPlan) -> None:
        for slots, size in zip(plan.buckets, plan.bucket_bytes):
            buffer = torch.empty(size + (MAC_BYTES if self.bucket_mac else 0), dtype=torch.uint8, device=self.device)
            pack(state_dict, slots, buffer)
            if self.bucket_mac:
                buffer[size:] = torch.frombuffer(bytearray(self.bucket_mac.next(buffer[:size])), dtype=torch.uint8)
            self._broadcast(buffer)

    def receive(self, plan: BroadcastPlan) -> ReceivedWeights:
        return ReceivedWeights(self, plan)


class ReceivedWeights:
    """One broadcast as a one-pass stream of (name, tensor): each bucket is received when the
    previous one has been read, and its tensors are views into it, so a worker holds one bucket
    rather than a second copy of the model. Tied names follow the tensor they share.
    `drain()` receives whatever was not read: every member must take part in every bucket."""

    def __init__(self, group: WeightGroup, plan: BroadcastPlan):
        self.group, self.plan = group, plan
        self.max_tensor_bytes = max((s.nbytes for slots in plan.buckets for s in slots), default=0)
        self._next_bucket = 0

    @torch.no_grad()
    def __iter__(self):
        if self._next_bucket:
            raise RuntimeError("a ReceivedWeights stream can be read once")
        aliases_of: dict[str, list[str]] = {}
        for alias, name in self.plan.aliases.items():
            aliases_of.setdefault(name, []).append(alias)
        for slots in self.plan.buckets:
            for name, t in unpack(self._receive_next(), slots):
                yield name, t
                for alias in aliases_of.get(name, ()):
                    yield alias, t

    def _receive_next(self) -> torch.Tensor:
        size, mac = self.plan.bucket_bytes[self._next_bucket], self.group.bucket_mac
        buffer = torch.empty(size + (MAC_BYTES if mac else 0), dtype=torch.uint8, device=self.group.device)
        self._next_bucket += 1
        self.group._broadcast(buffer)
        if mac is not None:
            mac.check(buffer[:size], buffer[size:])
            buffer = buffer[:size]
        if buffer.is_cuda:  # NCCL work is only queued; an engine may read it from another process (IPC)
            torch.cuda.current_stream(buffer.device).synchronize()
        return buffer

    def drain(self) -> None:
        while self._next_bucket < len(self.plan.buckets):
            self._receive_next()


class ForgedBucket(RuntimeError):
    """A broadcast bucket whose HMAC does not match: not what the learner sent."""


class BucketMac:
    """HMAC-SHA256 of each bucket's bytes and its number in the group's sequence (sender and
    receivers count alike, every member taking part in every bucket), under the run's secret: a
    bucket replayed, reordered or written by another process fails the check."""

    def __init__(self, secret: bytes):
        self.secret, self.count = secret, 0

    def next(self, data: torch.Tensor) -> bytes:
        mac = hmac.new(self.secret, self.count.to_bytes(8, "big"), hashlib.sha256)
        mac.update(data.numpy())
        self.count += 1
        return mac.digest()

    def check(self, data: torch.Tensor, received: torch.Tensor) -> None:
        number = self.count
        if not hmac.compare_digest(self.next(data), received.numpy().tobytes()):
            raise ForgedBucket(
                f"weight broadcast: bucket {number} does not carry this run's signature: its bytes are not "
                "what the learner sent; refusing to load them"
            )


def listen(host: str) -> socket.socket:
    """A socket bound to `host` on a free port, for rank 0's store."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((host, 0))
    sock.listen(128)
    return sock
