"""A learner that dies or hangs is restored in place: the run goes on, no step lost or repeated.

The learner actor is created with Ray `max_restarts` (resources.learner_restores), so Ray rebuilds
a lost one by running its constructor again, which reloads the model from its path. Such a
replacement answers nothing the run reads until the driver restores it (actors/learner.py raises
LearnerRestarted), so a loss between two calls cannot pass for the run's state.

A rank group (FSDP2) loses more than the lost rank: the survivors' process group has a dead
member, and a survivor may wait inside a collective. So every rank is restarted, the group is
formed again, and each rank reads its own shards of the last checkpoint before the replay.

The driver keeps the exact arguments of every update since the last checkpoint (object refs to
the samples and logprobs, and the KL coefficient; dropped when a checkpoint is written). Every
driver phase that calls the learner is marked `restores_learner`, and so goes through `run`: when
the phase fails and the learner turns out to be a replacement, `run` gives it the last
checkpoint's state (none yet: the constructor's weights and seed are the run's start), replays the
kept updates in order, and runs the phase again. The same arguments through the same
update on the same state give the same weights, optimizer and RNG state (on CPU the final weights
match an undisturbed run's: tests/e2e/test_learner_restore.py), so no optimizer step is skipped or
repeated and no sample trained twice. The rollout workers then get the restored weights with the
next sync, whose version goes on from theirs.

A learner past its deadline (resources.update_timeout_s) is killed to be restarted
(Supervisor.restorable), and restored the same way.

A learner lost with its node (resources.learner.node_resource names a node type, and no live node
is of that type) is restarted by Ray only once a node that can hold it joins: Ray places its
placement group's bundle again then. The driver says so in one line, naming what the node needs,
and waits for the replacement up to resources.rollout_timeout_s (a node's start and a model's
load); then restores it as above. Past that, the run stops (resumable).
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from actors.restarts import wait_restarted
from actors.supervision import role_actors
from relay.checkpoint.manifest import STATE, verify_checkpoint
from relay.config import RoleResources
from relay.failures import ActorLost, CallRaised
from relay_trainer.feasibility import alive_nodes, role_bundle
from relay_trainer.rank_group import RankGroup
from relay_trainer.weights import open_shared_memory

T = TypeVar("T")
LEARNER_GROUPS = ("policy", "optimizer")  # the learner's safetensors groups in a checkpoint (Learner.state)


class LearnerRecovery:
    """Wraps the driver's calls on the learner (`run`) and keeps what a replay needs (`keep`)."""

    def __init__(self, actors, limit: int, tag: str, resources: RoleResources | None = None):
        self.actors, self.tag, self.limit, self.enabled = actors, tag, limit, False
        self.resources = resources  # what the learner's actors ask of a node (resources.learner)
        self.node_wait: str | None = None  # what the current loss waits for: a node that can hold it
        self.base: Path | None = None  # the checkpoint the kept updates follow; None: the run's start
        self.kept: list[tuple[tuple, dict]] = []  # each update's arguments since `base`, in order
        self.restores = 0  # how many times the learner was restored: what it made before is from a lost one
        self.on_restore: list[Callable[[], None]] = []  # what else held the lost learner's refs
        self._enable()

    def _enable(self) -> None:
        self.enabled = self.limit > 0
        if self.enabled:  # past a deadline it is killed to be restarted, not for good
            self.actors.faults.restorable.update(a._actor_id for a in role_actors(self.actors.learner))

    def keep(self, *args, **kwargs) -> None:
        if self.enabled:
            self.kept.append((args, kwargs))

    def checkpointed(self, path: Path) -> None:
        """A checkpoint of the learner's current state was written: replays start from it."""
        self.base, self.kept = Path(path), []
        self._enable()

    def state_unknown(self) -> None:
        """The learner trained outside the kept updates (the supervised stage): until the next
        checkpoint a loss stops the run as before."""
        self.enabled = False
        self.actors.faults.restorable.difference_update(a._actor_id for a in role_actors(self.actors.learner))

    def run(self, phase: Callable[[], T], what: str) -> T:
        """`phase()`; if the learner was lost in it (died, or hung and was killed), restore it and
        run `phase()` again. Every other error, and a learner gone for good, raises as it is."""
        while True:
            try:
                return phase()
            except (RayActorError, RayTaskError, ActorLost) as error:
                self._recover(what, error)

    def restore_replacement(self, what: str) -> None:
        """A colocated worker lost in a rollout shard: its replacement restored (the shard is then
        redone on it, same prompts and seed), or the run stops where it cannot be."""
        self._recover(what, ActorLost(f"{what}: the learner that rolls it out was lost"))

    def _recover(self, what: str, error: Exception) -> None:
        self.node_wait = None
        while True:
            if not self.enabled or not self._state_lost():
                if self.node_wait is not None:
                    self.log(
                        f"relay: fault: {self._name()}: not restored within {self.actors.faults.rollout_timeout_s:.0f} s "
                        f"(resources.rollout_timeout_s) of waiting for a node with {self.node_wait}; the run stops"
                    )
                raise error
            try:
                return self._restore(what, error)
            except (RayActorError, RayTaskError, ActorLost):  # lost again while being restored
                continue

    def _state_lost(self) -> bool:
        """Whether the learner answers and is a replacement (Ray restarted it, or one of its ranks);
        False if it is gone."""
        faults, ranks = self.actors.faults, role_actors(self.actors.learner)
        # constructors load the model; a learner lost with its node waits for a node to be placed on
        if not all(wait_restarted(rank, faults.rollout_timeout_s, self._say_node_wait) for rank in ranks):
            return False
        try:
            return any(ray.get([rank.__ray_call__.remote(_needs_restore) for rank in ranks], timeout=faults.timeout_s))
        except (RayActorError, GetTimeoutError):
            return self._state_lost()  # lost again meanwhile; Ray's restarts bound this

    def _say_node_wait(self) -> None:
        """Once per loss, while the replacement does not answer: when no live node can hold the
        learner (its node died and none of its type is left), say what node Ray waits for."""
        if self.node_wait is not None or self.resources is None:
            return
        res, bundle = self.resources, role_bundle(self.resources)
        if any(all(node.get(k, 0.0) >= v for k, v in bundle.items()) for node in alive_nodes()):
            return  # a node can hold it: Ray restarts it there (its constructor loads the model)
        needs = [f"{res.node_resource} (resources.learner.node_resource)"] if res.node_resource else []
        needs += [f"{v:g} {k}" for k, v in bundle.items() if k in ("CPU", "GPU")]
        self.node_wait = " and ".join(needs)
        self.log(
            f"relay: fault: {self._name()} lost with its node; waiting for a node with {self.node_wait} to "
            f"restore it (up to {self.actors.faults.rollout_timeout_s:.0f} s, resources.rollout_timeout_s)"
        )

    def _name(self) -> str:
        ranks = role_actors(self.actors.learner)
        name = self.actors.faults.names.get(ranks[0]._actor_id, "learner-0")
        return f"{name.removesuffix('-0')} rank group ({len(ranks)} ranks)" if len(ranks) > 1 else name

    def _restore(self, what: str, error: Exception) -> None:
        start, faults, learner = time.monotonic(), self.actors.faults, self.actors.learner
        if isinstance(learner, RankGroup):
            self._form_rank_group_again(learner)
        groups, meta = self._base_state()
        faults.get(learner.restore.remote(groups, meta), learner, "restore", long=True)
        replays = [learner.update.remote(*args, **kwargs) for args, kwargs in self.kept]
        faults.get(replays, [learner] * len(replays), "replayed updates", long=True)
        if any(self.actors.shared_weights):  # the lost learner's buffers died with it: map new ones
            self.actors.shared_weights = open_shared_memory(learner, self.actors.rollout, tag=self.tag)
        if faults.weights is not None:  # a payload the lost learner made may be gone: make one per resend
            faults.weights = (learner.get_weights.remote, faults.weights[1])
        if self.actors.weight_broadcast is not None:  # the replacement is not in the group (its peers left
            self.actors.weight_broadcast.form_again()  # the lost one's collective: the connections closed)
        for reset in self.on_restore:
            reset()
        self.restores += 1
        faults.count("restarts")
        faults.count("learner_restores")
        if isinstance(error, RayActorError):
            faults.count("actor_errors")
        if isinstance(error, CallRaised):  # a rank's collective met a peer that died
            why = "a rank died"
        else:
            why = "no answer within its deadline" if isinstance(error, ActorLost) else "actor died"
        base = self.base.name if self.base is not None else "the run's start"
        self.log(
            f"relay: fault: {self._name()} {what}: {why}; restored from {base} + {len(self.kept)} replayed updates "
            f"in {time.monotonic() - start:.1f} s"
        )

    def log(self, line: str) -> None:
        self.actors.faults.log(line)

    def _form_rank_group_again(self, group: RankGroup) -> None:
        """Restart the ranks Ray has not (their process group has a dead member), then form the
        group again: every rank a replacement with its model sharded, none waiting in a collective."""
        faults = self.actors.faults
        fresh = ray.get([rank.__ray_call__.remote(_needs_restore) for rank in group.ranks], timeout=faults.timeout_s)
        survivors = [rank for rank, restarted in zip(group.ranks, fresh) if not restarted]
        if not group.restart(survivors, faults.rollout_timeout_s):
            raise ActorLost("a learner rank is gone (restarted with the group, no replacement answered)")

    def _base_state(self) -> tuple[dict[str, bytes] | None, dict | None]:
        """The base checkpoint's learner groups as their files' bytes (no torch here) and its meta; a
        rank group's: no groups, and the folder of its shards in the meta."""
        if self.base is None:
            return None, None
        verify_checkpoint(self.base)
        state = json.loads((self.base / STATE).read_text(encoding="utf-8"))["learner"]
        if "shards" in state:
            return None, {"shards": str(self.base / state["shards"])}
        return {g: (self.base / f"{g}.safetensors").read_bytes() for g in LEARNER_GROUPS}, state


def _needs_restore(actor) -> bool:
    return actor.needs_restore


def restores_learner(what: str):
    """Marks a driver phase that calls the learner: a learner lost in it (died, or hung and killed) is
    restored and the phase run again (LearnerRecovery.run, with the run's `actors.recovery`); every
    other error raises as it is. The phase's first argument is the run's Actors, or a step plan that
    holds them (`.actors`). Every phase of the loop and the step meets learner recovery here."""

    def wrap(phase: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(phase)
        def recovered(owner, *args, **kwargs) -> T:
            actors = getattr(owner, "actors", owner)
            return actors.recovery.run(lambda: phase(owner, *args, **kwargs), what)

        return recovered

    return wrap


class NoRecovery:
    """A run whose learner is not restored: every phase runs once, as it is."""

    enabled, restores = False, 0

    def __init__(self):
        self.on_restore: list[Callable[[], None]] = []

    def keep(self, *args, **kwargs) -> None:
        pass

    def checkpointed(self, path: Path) -> None:
        pass

    def state_unknown(self) -> None:
        pass

    def run(self, phase: Callable[[], T], what: str) -> T:
        return phase()

    def restore_replacement(self, what: str) -> None:
        raise ActorLost(f"{what}: the learner that rolls it out was lost")
