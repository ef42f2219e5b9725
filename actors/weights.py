"""Weight sync learner -> rollout workers, chosen by placement (`resources.weight_sync`).

object_store  The learner's state dict goes into Ray's object store once (relay.weight_transfer.
              WeightPayload) and every worker loads it. Works everywhere: CPU, shared GPUs, any
              mix of nodes. The default unless both roles hold whole GPUs.
broadcast     One collective group (relay.weight_transfer.WeightGroup): the learner is rank 0,
              rollout worker i is rank i + 1. NCCL when both roles hold whole GPUs (separate GPU
              pools, GPU to GPU), gloo otherwise (CPU: the same code path, tested in CI). Each
              worker hands the received tensors to its engine's in-place load (HF copy, vLLM
              reload / IPC, SGLang update_weights_from_tensor).

The group's store listens on the learner's address only: loopback when every member shares its node.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import ray
import torch

from relay.weight_transfer import BroadcastPlan, WeightGroup, WeightPayload, gather_as_peer, listen

# -- actor side: objects the Learner (sender) and each RolloutWorker (receiver) hold ----------


def node_id() -> str:
    """This process's Ray node, so the driver can tell whether every group member shares one."""
    return ray.get_runtime_context().get_node_id()


class WeightSender:
    """The learner's end: the object-store payload, or rank 0 of the broadcast group. Reads the
    weights through `state_dict` at every send, so it always sends the current ones.

    A sharded learner's ranks 1.. are `peer`s: they take part in gathering each full tensor
    (relay.weight_transfer.gather_as_peer) and send nothing."""

    def __init__(self, state_dict: Callable[[], dict[str, torch.Tensor]], peer: bool = False):
        self.state_dict, self.peer = state_dict, peer
        self.socket: socket.socket | None = None  # the group's store listens here (broadcast only)
        self.plan: BroadcastPlan | None = None
        self.group: WeightGroup | None = None

    def payload(self) -> WeightPayload | None:
        if self.peer:
            gather_as_peer(self.state_dict())
            return None
        return WeightPayload.of(self.state_dict())

    def listen(self, one_node: bool) -> tuple[str, int, BroadcastPlan]:
        host = "127.0.0.1" if one_node else ray.util.get_node_ip_address()
        self.socket = listen(host)
        self.plan = BroadcastPlan.of(self.state_dict())
        return host, self.socket.getsockname()[1], self.plan

    def join(self, host: str, port: int, world_size: int, backend: str, tag: str) -> None:
        self.group = WeightGroup(host, port, 0, world_size, backend, tag, local_host=host, listen_socket=self.socket)

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

    def __init__(self, engine):
        self.engine = engine
        self.plan: BroadcastPlan | None = None
        self.group: WeightGroup | None = None

    def load(self, weights: WeightPayload, version: int) -> float:
        """Load the payload the learner put in the object store; returns the seconds it took."""
        start = time.perf_counter()
        self.engine.update_weights(weights.tensors(), version)
        return time.perf_counter() - start

    def join(
        self, host: str, port: int, rank: int, world_size: int, backend: str, tag: str, plan: BroadcastPlan
    ) -> None:
        local_host = host if host == "127.0.0.1" else ray.util.get_node_ip_address()
        self.group, self.plan = WeightGroup(host, port, rank, world_size, backend, tag, local_host), plan

    def receive(self, version: int) -> float:
        """Load the broadcast into the engine as it arrives; returns the seconds it took."""
        start = time.perf_counter()
        weights = self.group.receive(self.plan)
        try:
            self.engine.update_weights(weights, version)
        finally:
            weights.drain()  # an engine that stopped early (an error) must not leave the learner waiting
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
    ray.get(
        [
            learner.join_weight_group.remote(host, port, world, backend, tag),
            *[w.join_weight_group.remote(host, port, i + 1, world, backend, tag, plan) for i, w in enumerate(workers)],
        ]
    )


def sync_weights(actors, version: int) -> float:
    """The learner's weights to every rollout worker, tagged `version`; returns the seconds it took."""
    start = time.perf_counter()
    ray.get(start_weight_sync(actors, version))
    return time.perf_counter() - start


def start_weight_sync(actors, version: int) -> list:
    """sync_weights without the wait: the refs of the calls that finish it. A worker busy with
    rollout calls loads the weights after them (actors run their calls in order)."""
    learner, workers = actors.learner, actors.rollout
    if actors.weight_broadcast:
        return [learner.broadcast_weights.remote(), *[w.receive_weights.remote(version) for w in workers]]
    weights = learner.get_weights.remote()  # put once (it stays in the object store), every worker reads it
    return [w.update_weights.remote(weights, version) for w in workers]
