"""Weight sync learner -> rollout workers, chosen by placement (`resources.weight_sync`).

object_store  Workers on the learner's node map two shared-memory buffers once (relay.weights.shared_memory);
              at each sync the learner writes its weights there and they copy them out: no
              pickling, no object-store put. Workers on other nodes (or every worker, when
              /dev/shm lacks the room) get the state dict through Ray's object store, put once
              (relay.weights.transfer.WeightPayload). Works everywhere: CPU, shared GPUs, any mix
              of nodes. The default unless both roles hold whole GPUs.
broadcast     One collective group (relay.weights.transfer.WeightGroup): the learner is rank 0,
              rollout worker i is rank i + 1. NCCL when both roles hold whole GPUs (separate GPU
              pools, GPU to GPU), gloo otherwise (CPU: the same code path, tested in CI). Each
              worker hands the received tensors to its engine's in-place load (HF copy, vLLM
              reload / IPC, SGLang update_weights_from_tensor).

The group's store listens on the learner's address only: loopback when every member shares its node.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from actors.restarts import PING_S, restart
from actors.supervision import ATTEMPTS_PER_CALL, Call, role_actors
from relay.failures import ActorLost

WEIGHT_LANE = "weights"  # rollout.partial: the rollout workers' concurrency group for weight calls

# -- actor side: the Learner's and each RolloutWorker's ends are in actors/weight_ends.py --------


# -- driver side ------------------------------------------------------------------------------


def sleep_engines(actors) -> None:
    """Free the rollout engines' GPU memory while the learner trains (the weight sync wakes them);
    a worker that died or hung is replaced and put to sleep, with the deadline resources.call_timeout_s."""
    faults = actors.faults
    calls = [  # a replacement has lost the shared-memory buffers: it gets the weights by object store first
        Call(w, lambda w=w: w.sleep.remote(), f"rollout-{i} sleep", on_restart=lambda w=w: faults.resend_weights(w))
        for i, w in enumerate(actors.rollout)
    ]
    faults.get_all(calls)


def uses_broadcast(resources) -> bool:
    """resources.weight_sync auto: broadcast when both roles hold whole GPUs (NCCL cannot put two
    ranks on one GPU, so shared GPUs go through the object store and the engine's in-place load)."""
    if resources.weight_sync != "auto":
        return resources.weight_sync == "broadcast"
    return resources.learner.gpus >= 1 and resources.rollout.gpus >= 1


def broadcast_backend(resources) -> str:
    return "nccl" if resources.learner.gpus >= 1 and resources.rollout.gpus >= 1 else "gloo"


@dataclass
class BroadcastGroup:
    """The learner and every rollout worker in one collective weight group (rank 0 sends). A
    worker that Ray restarted since the group formed, or a restored learner, is not in it: the
    group is formed again under a new tag before the next broadcast. A worker that dies or hangs
    in a broadcast leaves survivors that may wait inside the broken collective until its 10-minute
    timeout: every worker is restarted first. In sync mode here; the producer's overlapped syncs
    do the same between the calls in flight (relay_trainer/producer.py)."""

    backend: str
    tag: str
    generation: int = 0
    restarts_seen: int = 0  # the Supervisor's worker_restarts when the group formed

    def form(self, learner, workers: list, restarts_seen: int = 0) -> None:
        self.generation += 1
        open_broadcast(learner, workers, self.backend, tag=f"{self.tag}/{self.generation}")
        self.restarts_seen = restarts_seen

    def broken(self, faults) -> bool:
        """A member is not the one that joined: a worker restarted since, or the group was marked."""
        return faults.worker_restarts != self.restarts_seen

    def form_again(self) -> None:
        """Have the group formed again before the next broadcast (a member left it)."""
        self.restarts_seen = -1

    def sync(self, actors, version: int) -> None:
        faults, learner, workers = actors.faults, actors.learner, actors.rollout
        faults.weights = (learner.get_weights.remote, version)  # a worker restarted mid-rollout loads these first
        for _ in range(ATTEMPTS_PER_CALL):
            if self.broken(faults):
                try:
                    self.form(learner, workers, faults.worker_restarts)
                except (RayTaskError, RayActorError) as e:  # the learner may wait in it for its timeout: stop
                    raise ActorLost(f"the weight broadcast group could not form again ({type(e).__name__})") from None
            learner_refs, loads = start_weight_sync(actors, version)
            refs = [*learner_refs, *loads]
            _, pending = ray.wait(refs, num_returns=len(refs), timeout=faults.timeout_s, fetch_local=False)
            try:
                if not pending:
                    ray.get(refs)
                    return
            except (RayTaskError, RayActorError):
                if learner_lost(learner):
                    faults.get(learner_refs, learner, "weight broadcast")  # raises the learner's death
            faults.count("timeouts" if pending else "actor_errors")
            faults.log(
                f"relay: fault: weight broadcast v{version} failed; restarting the rollout workers to re-form it"
            )
            self.restart_members(faults, learner, workers, learner_refs)
            faults.count("retried_calls")
        raise ActorLost(f"the weight broadcast failed {ATTEMPTS_PER_CALL} times in a row")

    def restart_members(self, faults, learner, workers: list, learner_refs: list) -> None:
        """Restart every rollout worker (a survivor may wait inside the broken collective), each
        replacement waited for; the group is then formed again before the next broadcast."""
        answered = restart(workers, faults.rollout_timeout_s)
        # the learner's send fails once its peers are gone; past the deadline it is the hung one: the run stops
        faults.wait(learner_refs, [learner] * len(learner_refs), "weight broadcast")
        for i, ok in enumerate(answered):
            if not ok:
                raise ActorLost(f"rollout-{i}: the worker is gone (weight broadcast, and no replacement answered)")
            faults.count("restarts")
            faults.worker_restarts += 1
        self.form_again()


def learner_lost(learner) -> bool:
    try:
        ray.get(role_actors(learner)[0].__ray_ready__.remote(), timeout=PING_S)
    except (RayActorError, GetTimeoutError):
        return True
    return False


def open_broadcast(learner, workers: list, backend: str, tag: str) -> None:
    """Form the group: the learner binds its address and a free port, then every member joins at
    once. The run's secret, drawn here, reaches the members as call arguments (through Ray, not
    the store): only they can write the store's entries (relay.weights.signed_store)."""
    from relay.weights.signed_store import (
        SECRET_BYTES,  # torch.distributed: loaded by the plan's tensors' dtypes anyway
    )

    nodes = ray.get([learner.node_id.remote(), *[w.node_id.remote() for w in workers]])
    host, port, plan = ray.get(learner.listen_for_weight_group.remote(one_node=len(set(nodes)) == 1))
    world, secret = len(workers) + 1, secrets.token_bytes(SECRET_BYTES)
    ray.get(
        [
            learner.join_weight_group.remote(host, port, world, backend, tag, secret),
            *[
                w.join_weight_group.remote(host, port, i + 1, world, backend, tag, plan, secret)
                for i, w in enumerate(workers)
            ],
        ]
    )


def open_shared_memory(learner, workers: list, tag: str) -> list[bool]:
    """Map the learner's shared-memory buffers into every worker on its node, then unlink them
    (nothing is left in /dev/shm however the run ends). Which workers read from them."""
    nodes = ray.get([learner.node_id.remote(), *[w.node_id.remote() for w in workers]])
    same_node = [node == nodes[0] for node in nodes[1:]]
    if not any(same_node):
        return same_node
    handle = learner.open_shared_weights.remote(tag)  # not fetched: its plan holds torch dtypes (no torch here)
    try:
        mapped = ray.get([w.attach_shared_weights.remote(handle) for w, on in zip(workers, same_node) if on])
    finally:
        ray.get(learner.unlink_shared_weights.remote())
    return same_node if all(mapped) else [False] * len(workers)  # no room in /dev/shm: the object store for all


def sync_weights(actors, version: int) -> float:
    """The learner's weights to every rollout worker, tagged `version`; returns the seconds it took.
    The learner's part has a deadline (resources.call_timeout_s: past it, the learner is killed and
    the run stops, resumable; actors.faults.wait) before any worker waits on it. A worker that dies
    or hangs in its load (shared memory or object store) is restarted and loads the weights again,
    through the object store: the step goes on. A broadcast stops the run past its deadline."""
    start, faults, learner, workers = time.perf_counter(), actors.faults, actors.learner, actors.rollout
    if actors.colocated:  # the engine generates from the learner's module, tagged by its update (actors/colocated.py)
        return 0.0
    if actors.weight_broadcast:  # one collective: the learner and every worker at once
        actors.weight_broadcast.sync(actors, version)
        return time.perf_counter() - start
    written, shared = _shared_memory_write(actors, version)
    weights = learner.get_weights.remote() if not all(shared) else None  # put once, read by each
    sent = [r for r in (written, weights) if r is not None]
    faults.wait(sent, [learner] * len(sent), "weights")
    if written is not None:  # a learner that died writing is the error, not its readers' failed loads
        faults.get(written, learner, "weights")
    # what a worker that restarts from now on is sent (the first payload made then, if none yet)
    faults.weights = (weights if weights is not None else learner.get_weights.remote, version)
    calls = [_load_call(faults, i, w, on, written, version) for i, (w, on) in enumerate(zip(workers, shared))]
    try:
        faults.get_all(calls)
    except ActorLost:  # the workers failed on the payload: a learner that died making it is the cause
        ranks = role_actors(learner)
        faults.get([rank.__ray_ready__.remote() for rank in ranks], ranks, "weights")  # raises its death
        raise
    return time.perf_counter() - start


def _load_call(faults, i: int, worker, shared: bool, written, version: int) -> Call:
    """Worker i's load of `version`: from the learner's shared-memory buffers while it has them
    mapped; a replacement (Ray restarted it under the load, or before it: then its load answers
    None) has lost them, so it is sent the weights through the object store."""

    def submit():
        if faults.reads_shared_memory(worker, shared):
            return worker.load_shared_weights.remote(written, version)
        weights = faults.weights[0]
        return worker.update_weights.remote(weights() if callable(weights) else weights, version)

    call = Call(
        worker,
        submit,
        f"rollout-{i} {'shared-memory ' if shared else ''}weight load",
        on_restart=lambda: faults.restarted_workers.add(worker._actor_id),
        valid=lambda seconds: seconds is not None,
    )
    call.move = lambda: _left_the_pool(faults, call)
    return call


def _left_the_pool(faults, call: Call) -> bool:
    """An elastic pool's added worker lost under its load leaves the pool (Supervisor.reroute drops
    it, relay_trainer/elastic.py) instead of being waited for: out of the pool it needs no weights,
    so its load is done. The first min workers (reroute None) are waited for, as always."""
    if faults.reroute is None or faults.reroute(call.actor) is None:
        return False
    call.submit = lambda: ray.put(0.0)  # a load's answer: its seconds
    return True


def start_weight_sync(actors, version: int) -> tuple[list, list]:
    """sync_weights without the wait: the refs of the learner's calls, and of each rollout worker's
    load in worker order (a caller tells a worker that died under its load from a learner that
    failed). A worker busy with rollout calls loads the weights after them (calls run in order);
    with rollout.partial the call runs at once on the worker's weight lane and stages them for
    its rollout's next pause (relay/weights/staged.py)."""
    learner, workers = actors.learner, actors.rollout
    if actors.weight_broadcast:  # a worker restarted meanwhile is sent them through the object store
        actors.faults.weights = (learner.get_weights.remote, version)
        return [learner.broadcast_weights.remote()], [w.receive_weights.remote(version) for w in workers]
    written, shared = _shared_memory_write(actors, version)
    weights = learner.get_weights.remote() if not all(shared) else learner.get_weights.remote  # put once
    actors.faults.weights = (weights, version)  # what a restarted worker is sent
    lane = dict(concurrency_group=WEIGHT_LANE) if actors.weight_lane else {}  # rollout.partial: reach it mid-call
    loads = [
        w.load_shared_weights.options(**lane).remote(written, version)
        if on
        else w.update_weights.options(**lane).remote(weights, version)
        for w, on in zip(workers, shared)
    ]
    return [written] if written is not None else [], loads


def _shared_memory_write(actors, version: int) -> tuple[object, list[bool]]:
    """The learner's write into its shared-memory buffer (a ref, None when no worker reads it; each
    reader's load waits for it: the ref is its argument), and for each worker whether it reads it
    (else it is sent the weights through the object store)."""
    learner, workers = actors.learner, actors.rollout
    mapped = actors.shared_weights or [False] * len(workers)
    shared = [actors.faults.reads_shared_memory(w, on) for w, on in zip(workers, mapped)]
    written = learner.publish_shared_weights.remote(version) if any(shared) else None
    return written, shared
