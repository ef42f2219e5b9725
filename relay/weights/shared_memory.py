"""Weights from the learner to rollout workers on its node through shared memory (/dev/shm).

The learner writes its state dict into a file-backed buffer that every worker on the node has
mapped; a worker copies the tensors from there into its engine. No pickling and no object-store
put: a sync costs the learner one copy in and each worker one copy out (measured: the
object store's put and read at about three times the copies themselves, tiny model).

Two buffers, used by turns (version % 2), each with a header holding the version it holds (-1
while being written): a worker reads the version it was told to load and checks the header
before and after copying, so a buffer overwritten under it fails loudly instead of loading a mix.
The files are created 0600, mapped by the workers once, then unlinked: the memory lives as long
as the mappings, and a run that dies leaves nothing in /dev/shm.
"""

from __future__ import annotations

import math
import os
import secrets
from dataclasses import dataclass

import torch

from relay.weights.transfer import ALIGN, BroadcastPlan, pack, unpack

FOLDER = "/dev/shm"
HEADER = 4 * ALIGN  # bytes before the tensors: the version (int64) and room; keeps the tensors aligned


@dataclass(frozen=True)
class SharedWeightsHandle:
    """What a worker needs to map the buffers (a few hundred bytes through Ray)."""

    paths: tuple[str, str]
    plan: BroadcastPlan  # one bucket: where each tensor lies after the header


class SharedWeights:
    """Both ends: `create` (the learner) and `attach` (a worker) map the same two buffers."""

    def __init__(self, handle: SharedWeightsHandle, buffers: list[torch.Tensor]):
        self.handle, self.buffers = handle, buffers
        self.slots = handle.plan.buckets[0]

    @classmethod
    def create(cls, state_dict: dict[str, torch.Tensor], tag: str, folder: str = FOLDER) -> SharedWeights | None:
        """Two buffers for this state dict, or None when the folder is missing or lacks the room
        (Docker's default /dev/shm is 64 MB; a write past its end would kill the process)."""
        plan = BroadcastPlan.of(state_dict, bucket_limit=math.inf)
        size = HEADER + plan.bucket_bytes[0]
        try:
            stats = os.statvfs(folder)
        except OSError:
            return None
        if stats.f_bavail * stats.f_frsize < 2 * size + (64 << 20):  # both buffers and a margin
            return None
        name = f"relay-weights-{''.join(c if c.isalnum() else '-' for c in tag)[:40]}-{secrets.token_hex(8)}"
        paths = (f"{folder}/{name}-0", f"{folder}/{name}-1")
        for path in paths:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
            try:
                os.posix_fallocate(fd, 0, size)  # the pages exist now: no SIGBUS on a full tmpfs later
            finally:
                os.close(fd)
        shared = cls.attach(SharedWeightsHandle(paths, plan))
        for buffer in shared.buffers:
            buffer[:8].view(torch.int64).fill_(-1)
        return shared

    @classmethod
    def attach(cls, handle: SharedWeightsHandle) -> SharedWeights:
        size = HEADER + handle.plan.bucket_bytes[0]
        return cls(handle, [torch.from_file(p, shared=True, size=size, dtype=torch.uint8) for p in handle.paths])

    def unlink(self) -> None:
        """Remove the names; the mappings (and the memory) stay until every process drops them."""
        for path in self.handle.paths:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def version_in(self, version: int) -> int:
        return int(self.buffers[version % 2][:8].view(torch.int64))

    def write(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        buffer = self.buffers[version % 2]
        buffer[:8].view(torch.int64).fill_(-1)
        pack(state_dict, self.slots, buffer[HEADER:])
        buffer[:8].view(torch.int64).fill_(version)

    def read(self, version: int):
        """(name, tensor) views of `version`'s buffer, tied names too; the caller copies them and
        then calls `check(version)`."""
        self.check(version)
        out = dict(unpack(self.buffers[version % 2][HEADER:], self.slots))
        return out | {alias: out[name] for alias, name in self.handle.plan.aliases.items()}

    def check(self, version: int) -> None:
        found = self.version_in(version)
        if found != version:
            raise RuntimeError(
                f"shared-memory weights: the buffer for version {version} holds version {found} "
                "(-1: being written): the learner overwrote it before this worker finished loading"
            )
