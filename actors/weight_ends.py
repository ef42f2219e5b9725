"""The two ends of the weight sync (relay_trainer/weights.py has the driver's side): the Learner sends
(`SendsWeights`), each RolloutWorker receives (`ReceivesWeights`). The driver calls the methods
below by name on the actors that derive from them; only actors import this module (torch)."""

from __future__ import annotations

import socket
import time

import torch

from actors.plumbing import member_host, on_rank_group, store_host
from relay.fault_points import hit
from relay.weights.shared_memory import SharedWeights, SharedWeightsHandle
from relay.weights.transfer import BroadcastPlan, WeightGroup, WeightPayload, gather_as_peer, listen

# Broadcast groups this process has left, kept for its life: a gloo group whose peers died may abort
# the whole process when it is destroyed, and the group is formed again after exactly such a loss.
_left_groups: list[WeightGroup] = []


def _leave(group: WeightGroup | None) -> None:
    if group is not None:
        _left_groups.append(group)


class SendsWeights:
    """The learner's end: the object-store payload, the same-node shared-memory buffers, or rank 0
    of the broadcast group. The class that derives from it says what it sends: `_weights_to_send`,
    read at every send, so the current weights always go; `_weight_peer`, true on ranks 1.. of a
    sharded learner, which take part in gathering each full tensor
    (relay.weights.transfer.gather_as_peer) and send nothing."""

    weight_socket: socket.socket | None = None  # the broadcast group's store listens here
    weight_plan: BroadcastPlan | None = None
    weight_group: WeightGroup | None = None
    shared_weights: SharedWeights | None = None  # the same-node buffers (object_store transport)

    def _weights_to_send(self) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def _weight_peer(self) -> bool:
        return False

    @on_rank_group("every_rank")
    def get_weights(self) -> WeightPayload | None:
        if self._weight_peer():
            gather_as_peer(self._weights_to_send())
            return None
        return WeightPayload.of(self._weights_to_send())

    @on_rank_group("rank_zero")
    def open_shared_weights(self, tag: str) -> SharedWeightsHandle | None:
        """Create the shared-memory buffers; None where /dev/shm lacks the room."""
        self.shared_weights = SharedWeights.create(self._weights_to_send(), tag)
        return self.shared_weights.handle if self.shared_weights else None

    @on_rank_group("every_rank")
    def publish_shared_weights(self, version: int) -> None:
        if self._weight_peer():  # rank 0 writes; the others take part in gathering each full tensor
            gather_as_peer(self._weights_to_send())
            return
        self.shared_weights.write(self._weights_to_send(), version)

    @on_rank_group("rank_zero")
    def unlink_shared_weights(self) -> None:
        self.shared_weights.unlink()

    @on_rank_group("rank_zero")
    def listen_for_weight_group(self, one_node: bool) -> tuple[str, int, BroadcastPlan]:
        host = store_host(one_node)
        self.weight_socket = listen(host)
        self.weight_plan = BroadcastPlan.of(self._weights_to_send())
        return host, self.weight_socket.getsockname()[1], self.weight_plan

    @on_rank_group("rank_zero")
    def join_weight_group(self, host: str, port: int, world_size: int, backend: str, tag: str, secret: bytes) -> None:
        _leave(self.weight_group)
        self.weight_group = WeightGroup(
            host, port, 0, world_size, backend, tag, local_host=host, listen_socket=self.weight_socket, secret=secret
        )

    @on_rank_group("every_rank")
    def broadcast_weights(self) -> None:
        weights = self._weights_to_send()
        if self._weight_peer():
            self.weight_plan = self.weight_plan or BroadcastPlan.of(
                weights
            )  # rank 0's plan: the same tensors, same order
            gather_as_peer(weights, self.weight_plan)
            return
        self.weight_group.send(weights, self.weight_plan)


class ReceivesWeights:
    """A rollout worker's end, loading into its `engine`: the object-store payload, the learner's
    shared-memory buffers, or rank i + 1 of the broadcast group for rollout worker i. The `_load*`
    methods return the seconds a load took; the worker decides when it runs (now, or staged)."""

    weight_plan: BroadcastPlan | None = None
    weight_group: WeightGroup | None = None
    shared_weights: SharedWeights | None = None

    def attach_shared_weights(self, handle: SharedWeightsHandle | None) -> bool:
        """Map the learner's buffers; False when it has none (no room in /dev/shm)."""
        self.shared_weights = None if handle is None else SharedWeights.attach(handle)
        return self.shared_weights is not None

    def join_weight_group(
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
        _leave(self.weight_group)
        self.weight_group = WeightGroup(host, port, rank, world_size, backend, tag, member_host(host), secret=secret)
        self.weight_plan = plan

    def _load(self, weights: WeightPayload, version: int) -> float:
        """Load the payload the learner put in the object store."""
        hit("weights.load.object_store")
        start = time.perf_counter()
        self.engine.update_weights(weights.tensors(), version)
        return time.perf_counter() - start

    def _load_shared(self, version: int) -> float:
        """Copy `version` from the shared-memory buffer into the engine."""
        if self.shared_weights is None:  # e.g. a restarted worker: the buffers' names are gone, it cannot map them
            raise RuntimeError("this rollout worker has not mapped the learner's shared-memory weights")
        hit("weights.load.shared_memory")
        start = time.perf_counter()
        self.engine.update_weights(self.shared_weights.read(version), version)
        self.shared_weights.check(version)  # not overwritten while we copied
        return time.perf_counter() - start

    def _receive(self, version: int) -> float:
        """Load the broadcast into the engine as it arrives."""
        hit("weights.load.broadcast")
        start = time.perf_counter()
        weights = self.weight_group.receive(self.weight_plan)
        try:
            self.engine.update_weights(weights, version)
        finally:
            weights.drain()  # an engine that stopped early (an error) must not leave the learner waiting
        return time.perf_counter() - start
