"""The two ends of the weight sync (actors/weights.py has the driver's side): the Learner's
WeightSender and each RolloutWorker's WeightReceiver. Only actors import this module (torch)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import ray
import torch

from relay.engines.base import Engine
from relay.weights.shared_memory import SharedWeights, SharedWeightsHandle
from relay.weights.transfer import BroadcastPlan, WeightGroup, WeightPayload, gather_as_peer, listen


class WeightSender:
    """The learner's end: the object-store payload, or rank 0 of the broadcast group. Reads the
    weights through `state_dict` at every send, so it always sends the current ones.

    A sharded learner's ranks 1.. are `peer`s: they take part in gathering each full tensor
    (relay.weights.transfer.gather_as_peer) and send nothing."""

    def __init__(self, state_dict: Callable[[], dict[str, torch.Tensor]], peer: bool = False):
        self.state_dict, self.peer = state_dict, peer
        self.socket: socket.socket | None = None  # the group's store listens here (broadcast only)
        self.plan: BroadcastPlan | None = None
        self.group: WeightGroup | None = None
        self.shared: SharedWeights | None = None  # the same-node buffers (object_store transport)

    def payload(self) -> WeightPayload | None:
        if self.peer:
            gather_as_peer(self.state_dict())
            return None
        return WeightPayload.of(self.state_dict())

    def open_shared(self, tag: str) -> SharedWeightsHandle | None:
        """Create the shared-memory buffers; None where /dev/shm lacks the room."""
        self.shared = SharedWeights.create(self.state_dict(), tag)
        return self.shared.handle if self.shared else None

    def publish_shared(self, version: int) -> None:
        if self.peer:  # rank 0 writes; the others take part in gathering each full tensor
            gather_as_peer(self.state_dict())
            return
        self.shared.write(self.state_dict(), version)

    def unlink_shared(self) -> None:
        self.shared.unlink()

    def listen(self, one_node: bool) -> tuple[str, int, BroadcastPlan]:
        host = "127.0.0.1" if one_node else ray.util.get_node_ip_address()
        self.socket = listen(host)
        self.plan = BroadcastPlan.of(self.state_dict())
        return host, self.socket.getsockname()[1], self.plan

    def join(self, host: str, port: int, world_size: int, backend: str, tag: str, secret: bytes) -> None:
        self.group = WeightGroup(
            host, port, 0, world_size, backend, tag, local_host=host, listen_socket=self.socket, secret=secret
        )

    def broadcast(self) -> None:
        if self.peer:
            state_dict = self.state_dict()
            self.plan = self.plan or BroadcastPlan.of(state_dict)  # rank 0's plan: the same tensors, same order
            gather_as_peer(state_dict, self.plan)
            return
        self.group.send(self.state_dict(), self.plan)


class WeightReceiver:
    """A rollout worker's end, loading into its engine: the object-store payload, or rank i + 1
    of the broadcast group for rollout worker i."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.plan: BroadcastPlan | None = None
        self.group: WeightGroup | None = None
        self.shared: SharedWeights | None = None

    def load(self, weights: WeightPayload, version: int) -> float:
        """Load the payload the learner put in the object store; returns the seconds it took."""
        start = time.perf_counter()
        self.engine.update_weights(weights.tensors(), version)
        return time.perf_counter() - start

    def attach_shared(self, handle: SharedWeightsHandle | None) -> bool:
        """Map the learner's buffers; False when it has none (no room in /dev/shm)."""
        self.shared = None if handle is None else SharedWeights.attach(handle)
        return self.shared is not None

    def load_shared(self, version: int) -> float:
        """Copy `version` from the shared-memory buffer into the engine; returns the seconds it took."""
        if self.shared is None:  # e.g. a restarted worker: the buffers' names are gone, it cannot map them
            raise RuntimeError("this rollout worker has not mapped the learner's shared-memory weights")
        start = time.perf_counter()
        self.engine.update_weights(self.shared.read(version), version)
        self.shared.check(version)  # not overwritten while we copied
        return time.perf_counter() - start

    def join(
        self,
        host: str,
        port: int,
        rank: int,
        world_size: int,
        backend: str,
        tag: str,
        plan: BroadcastPlan,
        secret: bytes,
    ) -> None:
        local_host = host if host == "127.0.0.1" else ray.util.get_node_ip_address()
        self.group = WeightGroup(host, port, rank, world_size, backend, tag, local_host, secret=secret)
        self.plan = plan

    def receive(self, version: int) -> float:
        """Load the broadcast into the engine as it arrives; returns the seconds it took."""
        start = time.perf_counter()
        weights = self.group.receive(self.plan)
        try:
            self.engine.update_weights(weights, version)
        finally:
            weights.drain()  # an engine that stopped early (an error) must not leave the learner waiting
        return time.perf_counter() - start
