"""The rollout side of training.mode one_step_off and async: calls kept in flight on the rollout
workers, their finished groups scored and moved into a bounded buffer (relay/run/pipeline.py).

A worker is a serial actor: the weights the driver sends after an update queue behind the calls
already given to it and reach it between two calls, so every call runs on one weight version and
its samples record it. The driver never waits for a sync; it waits only in `take`, for data.

Faults: a worker that dies fails every call queued on it. The first such failure
waits for Ray's replacement and re-sends it the current weights (actors/supervision.py); the groups
of each lost call that had not come back are then sent again, with their prompts, group indices
and seed, to the replacement. They stay "in flight" in the buffer meanwhile, so they are neither
counted twice nor trained twice. A call answered from a fresh state (a replacement that ran it before its weights came
back: samples on another version than the call was made on) is redone the same way. A worker that
hangs (calls in flight, and no group back for `resources.rollout_timeout_s`) is killed to be
restarted, and its calls are redone the same way. Counted as faults/actor_errors, faults/timeouts,
faults/restarts and faults/retried_shards; worker-side faults (environment pools, tool executors)
come back in each call's metrics and are counted too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from actors.restarts import wait_restarted
from actors.supervision import ATTEMPTS_PER_CALL, Call, ShardLost
from relay.config.role_settings import ProducerSettings
from relay.envs.data import PromptIterator
from relay.failures import ActorLost, raised_line
from relay.fault_points import hit
from relay.run import metric_keys as keys
from relay.run.pipeline import Group, GroupBuffer
from relay.run.step_metrics import merge_rollout_metrics
from relay.types import Sample
from relay_trainer.weights import start_weight_sync

# Every call the buffer has room for is started at once, spread over the workers, and queues on its
# worker: while the driver waits on the learner, the workers still have work.


@dataclass
class RolloutCall:
    """What a call needs to be sent again, the same, to a restarted worker."""

    worker: int
    indices: list[int]  # the buffer's group indices, in the order of `rows`
    rows: list[dict]
    seed_round: int  # seeds the worker's sampling: a redone call samples what the lost one would have
    version: int  # the weights the worker holds when it runs the call
    life: int  # the worker's restarts the producer had seen when it sent the call
    attempt: int = 1
    received: set[int] = field(default_factory=set)  # positions in `rows` of the groups already back


class RolloutProducer:
    def __init__(
        self,
        settings: ProducerSettings,
        actors,
        prompts: PromptIterator,
        score: Callable[[list[Sample]], dict[str, float]],
        start_step: int,
        state: dict | None = None,
    ):
        t = settings.training
        if actors.rollout_sleeps:
            raise ValueError(
                f"training.mode={t.mode} overlaps rollout and training: set rollout.sleep_while_training=false"
            )
        self.settings, self.actors, self.prompts, self.score = settings, actors, prompts, score
        one_step_off = t.mode == "one_step_off"
        self.buffer = GroupBuffer(
            t.prompts_per_step,
            1 if one_step_off else t.max_staleness,
            ordered=one_step_off,
            next_step=start_step,
            steps=t.steps,
        )
        workers = len(actors.rollout)
        self.per_call = t.prompts_per_step // workers if one_step_off or not t.groups_per_call else t.groups_per_call
        self.version = start_step  # the newest weights sent to the workers
        self.calls: dict = {}  # the stream of each call in flight -> RolloutCall
        self.lives = [0] * workers  # restarts of each worker the producer has recovered from
        self.quiet_since = [0.0] * workers  # when each worker last showed progress (a hang is measured from it)
        self.redo: list[tuple[int, dict]] = []  # (group index, prompt row) of stale groups drawn again
        self.rows: dict[int, dict] = {}  # prompt row of every group started and not yet trained
        self.next_group, self.calls_made = 0, 0
        self.learner_refs: list = []  # the last weight sync's calls on the learner
        self.weight_refs: list = []  # and each rollout worker's load, in worker order
        self.finished: list[dict] = []  # metrics of the calls received since the last take
        self.score_metrics: dict[str, float] = {}
        if state:
            self.buffer.load_state_dict(state["buffer"])
            self.next_group, self.calls_made = state["next_group"], state["calls_made"]
            self.redo = [(i, row) for i, row in state["redo"]]
            self.rows = {int(i): row for i, row in state["rows"].items()}

    # -- producer -----------------------------------------------------------------------------

    def fill(self) -> None:
        """Start calls while the buffer has room, each on the worker with the fewest queued."""
        room = self.buffer.room(self.version)
        load = [0] * len(self.actors.rollout)
        for call in self.calls.values():
            load[call.worker] += 1
        while room > 0:
            worker = load.index(min(load))
            size = min(self.per_call, room)
            batch = [self.redo.pop(0) for _ in range(min(size, len(self.redo)))]
            fresh = self.prompts.take(size - len(batch))
            batch += [(self.next_group + i, row) for i, row in enumerate(fresh)]
            self.next_group += len(fresh)
            indices = [i for i, _ in batch]
            self.rows.update(batch)
            rows = [row for _, row in batch]
            self._send(RolloutCall(worker, indices, rows, self.calls_made, self.version, self.lives[worker]))
            self.buffer.started(indices)
            self.calls_made += 1
            load[worker] += 1
            room -= size

    def _send(self, call: RolloutCall) -> None:
        # A stream: each group comes back as soon as its episodes end (continuous batching). The
        # worker numbers the groups 0..k-1 by position in `rows`; _receive maps them to the buffer's.
        if not any(c.worker == call.worker for c in self.calls.values()):
            self.quiet_since[call.worker] = time.monotonic()  # an idle worker starts work now
        worker = self.actors.rollout[call.worker]
        # rollout.partial: the worker starts the call on call.version or newer (weights reach it on another lane)
        partial = dict(version=call.version) if self.settings.partial else {}
        stream = worker.rollout_stream.options(num_returns="streaming").remote(call.rows, call.seed_round, 0, **partial)
        self.calls[stream] = call

    def _receive(self, stream) -> None:
        """The next group of a call in flight; a call whose stream ended leaves `calls`."""
        call, faults = self.calls[stream], self.actors.faults
        try:
            samples, metrics = ray.get(next(stream))
        except StopIteration:
            del self.calls[stream]
            self.quiet_since[call.worker] = time.monotonic()
            return None
        except ShardLost as lost:  # the worker's environment pool died under the episodes
            del self.calls[stream]
            lost = getattr(lost, "cause", lost)  # Ray's error (with the worker's traceback) wraps the ShardLost
            faults.add(lost.counts)
            return self._redo(call, f"its environment pool was lost ({lost})")
        except RayActorError as e:
            del self.calls[stream]
            faults.count("actor_errors")
            self._recover(call, type(e).__name__)
            return self._redo(call, "the worker died under it")
        except RayTaskError as e:  # the call raised in relay's code; the worker lives: redone on it
            del self.calls[stream]
            faults.count("call_errors")
            return self._redo(call, f"it raised {raised_line(e)}")
        if any(self._wrong_version(s, call) for s in samples):
            # a replacement ran it on the weights it was built with, before they were re-sent (the
            # rest of its stream too: it is left unread)
            del self.calls[stream]
            self._recover(call, "restarted")
            return self._redo(call, "a restarted worker ran it before its weights were re-sent")
        self.quiet_since[call.worker] = time.monotonic()
        call.received.update(s.group_id for s in samples)
        for s in samples:
            s.group_id = call.indices[s.group_id]
        faults.add({k: v for k, v in metrics.items() if k.startswith("faults/")})  # env and tool faults
        for key, value in self.score(samples).items():  # counts: summed over the step's calls
            self.score_metrics[key] = self.score_metrics.get(key, 0.0) + value
        self.finished.append(metrics)
        self.buffer.put(samples)
        return None

    def _wrong_version(self, sample: Sample, call: RolloutCall) -> bool:
        """Not on the weights the call was made on. rollout.partial: weights load mid-call, so a
        sample's tokens may be newer (Sample.token_versions say which); only older is wrong."""
        if self.settings.partial:
            return sample.weight_version < call.version
        return sample.weight_version != call.version

    def _recover(self, call: RolloutCall, why: str) -> None:
        """Once per restart of a worker (every call queued on it fails): wait for Ray's replacement,
        then re-send it the current weights, which queue before the calls sent again."""
        if self.lives[call.worker] > call.life:
            return  # recovered already, from an earlier call's failure
        faults, worker = self.actors.faults, self.actors.rollout[call.worker]
        if not wait_restarted(worker, self.settings.rollout_timeout_s):
            raise ActorLost(f"rollout-{call.worker}: the worker is gone ({why}, and no replacement answered)")
        faults.count("restarts")
        self.lives[call.worker] += 1
        self.quiet_since[call.worker] = time.monotonic()
        try:
            faults.resend_weights(worker)  # the current version; from now on through the object store
        except (RayActorError, GetTimeoutError) as e:  # died again: the redone call meets it and recovers
            faults.log(f"relay: fault: rollout-{call.worker}: re-sending its weights failed ({type(e).__name__})")

    def _redo(self, call: RolloutCall, why: str) -> None:
        if call.attempt >= ATTEMPTS_PER_CALL:
            raise ActorLost(f"rollout-{call.worker}: a rollout call failed {call.attempt} times in a row ({why})")
        self.actors.faults.count("retried_shards")
        self.actors.faults.log(
            f"relay: fault: rollout-{call.worker} rollout call of groups {call.indices}: {why}; redoing those not back"
        )
        left = [k for k in range(len(call.rows)) if k not in call.received]  # the groups not yet back
        indices, rows = [call.indices[k] for k in left], [call.rows[k] for k in left]
        life, version = self.lives[call.worker], self.version
        self._send(RolloutCall(call.worker, indices, rows, call.seed_round, version, life, call.attempt + 1))

    # -- consumer -----------------------------------------------------------------------------

    def take(self) -> tuple[list[Sample], dict[str, float]]:
        """The next step's samples: waits (learner idle) until enough groups are finished."""
        hit("producer.queue")
        dropped = 0
        while True:
            self._receive_finished()  # older groups already back must be in the buffer before it picks
            groups, stale = self.buffer.take()
            dropped += len(stale)
            self._stale(stale)
            if groups is not None:
                break
            self.fill()  # dropped groups left room
            if not self.calls:
                raise RuntimeError("the pipeline has no rollout in flight and too few groups to train on")
            self._progress()
        self.fill()
        for g in groups:
            del self.rows[g.index]
        metrics = {
            **merge_rollout_metrics(self.finished),
            **self.score_metrics,
            keys.QUEUE_DEPTH: float(len(self.buffer.ready)),
            keys.IN_FLIGHT: float(len(self.buffer.in_flight)),
            keys.DROPPED_STALE: float(dropped),
        }
        self.finished, self.score_metrics = [], {}
        return [s for g in sorted(groups, key=lambda g: g.index) for s in g.samples], metrics

    def _receive_finished(self) -> None:
        """Read every group already back, without waiting. A worker runs its calls in order, but
        ray.wait over several streams answers one of the ready ones, not the oldest: when a step
        finds two calls finished (say an evaluation kept the driver away), it could fill up on the
        newer call's groups, train them, and drop the older call's, finished first, as stale."""
        while self.calls:
            done, _ = ray.wait(list(self.calls), num_returns=1, timeout=0, fetch_local=False)
            if not done:
                return
            self._receive(done[0])

    def _progress(self, loads: dict | None = None, wake: list = ()) -> None:
        """Wait until a group comes back (received here) or one of `loads` (weight load ref -> its
        worker) or of `wake` is done, at most until the earliest deadline of a busy worker; a worker
        past it is killed so that Ray restarts it (a hung method cannot be cancelled), and its calls
        fail into _receive's recovery."""
        timeout, loads = self.settings.rollout_timeout_s, loads or {}
        busy = {call.worker for call in self.calls.values()} | set(loads.values())
        now = time.monotonic()
        left = min((self.quiet_since[w] + timeout - now for w in busy), default=timeout)
        waited = [*self.calls, *loads, *wake]
        done, _ = ray.wait(waited, num_returns=1, timeout=max(0.0, left), fetch_local=False)
        for ready in done:
            if ready in self.calls:
                return self._receive(ready)
        if done:
            return None
        for w in sorted(busy):
            if time.monotonic() - self.quiet_since[w] >= timeout:
                self.actors.faults.count("timeouts")
                self.actors.faults.log(
                    f"relay: fault: rollout-{w}: no group back within {timeout:g}s (resources.rollout_timeout_s); "
                    "killing the worker to restart it"
                )
                ray.kill(self.actors.rollout[w], no_restart=False)
                self.quiet_since[w] = time.monotonic()  # its calls now fail; their recovery waits for the restart
        return None

    def _stale(self, groups: list[Group]) -> None:
        if self.settings.training.stale_groups == "regenerate":
            self.redo += [(g.index, self.rows[g.index]) for g in groups]
        else:
            for g in groups:
                del self.rows[g.index]

    def sync_weights(self, version: int) -> None:
        """Send the learner's new weights without waiting: each worker loads them after its
        calls in flight, before the calls started from now on. A failed previous sync
        raises here, unless a rollout worker died under it (its next call recovers it; under a
        broadcast every worker is restarted and the group formed again)."""
        self._wait_weights()
        group = self.actors.weight_broadcast
        if group is not None and group.broken(self.actors.faults):  # a member is not the one that joined:
            self.drain()  # once every call in flight is back, every member is idle and can join
            self._form_broadcast(group)
        busy = {call.worker for call in self.calls.values()}
        for w in set(range(len(self.actors.rollout))) - busy:
            self.quiet_since[w] = time.monotonic()  # an idle worker starts loading now
        self.learner_refs, self.weight_refs = start_weight_sync(self.actors, version)
        self.version = version
        self.fill()

    def forget_learner_calls(self) -> None:
        """The last sync's calls on a learner that was lost and restored since: the next sync sends
        the restored weights (workers whose load failed keep theirs until then)."""
        self.learner_refs, self.weight_refs = [], []

    def drain(self) -> None:
        """Wait for every call in flight and keep its groups (a checkpoint saves them)."""
        while self.calls:
            self._progress()
        self._wait_weights()

    def _wait_weights(self) -> None:
        """The last sync's loads. A worker that died under its load, or a replacement that has not
        mapped the learner's shared memory (its load answers None), is left to its next call's
        check, which re-sends it the weights; any other failure raises."""
        if self.actors.weight_broadcast:
            return self._wait_broadcast()
        learner = self.actors.learner  # past resources.call_timeout_s it is killed and the run stops
        self.actors.faults.get(self.learner_refs, [learner] * len(self.learner_refs), "weights")
        # a load waits behind the worker's calls in flight: groups keep coming meanwhile, and a hung
        # worker is found as in take
        while (
            pending := self.weight_refs and ray.wait(self.weight_refs, num_returns=len(self.weight_refs), timeout=0)[1]
        ):
            self._progress({ref: w for w, ref in enumerate(self.weight_refs) if ref in pending})
        for w, ref in enumerate(self.weight_refs):
            try:
                ray.get(ref)
            except RayActorError:
                self.actors.faults.count("actor_errors")
            except RayTaskError as e:  # the load raised; the worker lives: load again, through the object store
                self.actors.faults.count("call_errors")
                self._reload(w, f"its weight load raised {raised_line(e)}")
        self.learner_refs, self.weight_refs = [], []

    def _wait_broadcast(self) -> None:
        """The last broadcast: the learner sends while each worker receives, after its calls in
        flight (a hung worker is found as in take). A member lost in it may leave survivors waiting
        inside the broken collective: every worker is restarted and the group formed again among
        the idle replacements; their calls in flight are redone after the next broadcast (or, on
        the weights re-sent through the object store, when their version is found stale). A
        learner lost in it raises, to be restored."""
        faults, learner, refs = self.actors.faults, self.actors.learner, [*self.learner_refs, *self.weight_refs]
        while True:
            done, pending = ray.wait(refs, num_returns=len(refs), timeout=0) if refs else ([], [])
            if not pending or _raised(done):
                break
            self._progress({ref: w for w, ref in enumerate(self.weight_refs) if ref in pending}, wake=self.learner_refs)
        if _raised(done):
            if _raised([r for r in self.learner_refs if r in done], RayActorError):  # it died: restored
                faults.get(self.learner_refs, [learner] * len(self.learner_refs), "weight broadcast")
            faults.count("actor_errors")
            faults.log(f"relay: fault: weight broadcast v{self.version} failed; restarting the rollout workers")
            self.actors.weight_broadcast.restart_members(faults, learner, self.actors.rollout, self.learner_refs)
            # their calls in flight fail into _redo (recovered here); the idle replacements join now
            self.lives = [life + 1 for life in self.lives]
            self.quiet_since = [time.monotonic()] * len(self.lives)
            self._form_broadcast(self.actors.weight_broadcast)
        self.learner_refs, self.weight_refs = [], []

    def _form_broadcast(self, group) -> None:
        self.actors.faults.log("relay: fault: forming the weight broadcast group again")
        try:
            group.form(self.actors.learner, self.actors.rollout, self.actors.faults.worker_restarts)
        except (RayTaskError, RayActorError) as e:
            raise ActorLost(f"the weight broadcast group could not form again ({type(e).__name__})") from None

    def _reload(self, w: int, why: str) -> None:
        faults, worker = self.actors.faults, self.actors.rollout[w]
        faults.log(f"relay: fault: rollout-{w} weight load: {why}; loading them again")
        weights, version = faults.weights
        load = lambda: worker.update_weights.remote(weights() if callable(weights) else weights, version)  # noqa: E731
        resend = lambda: faults.resend_weights(worker)  # noqa: E731
        faults.get_all([Call(worker, load, f"rollout-{w} weight load", on_restart=resend)])
        faults.count("retried_calls")

    def state_dict(self) -> dict:
        """Drains first: the finished groups are saved, so a resumed run trains each prompt once."""
        self.drain()
        return {
            "buffer": self.buffer.state_dict(),
            "next_group": self.next_group,
            "calls_made": self.calls_made,
            "redo": [list(item) for item in self.redo],
            "rows": {str(i): row for i, row in self.rows.items()},
        }


def _raised(done: list, errors: tuple | type = (RayActorError, RayTaskError)) -> bool:
    """Whether any of the finished refs `done` raised one of `errors` (an actor died, a call raised)."""
    for ref in done:
        try:
            ray.get(ref)
        except (RayActorError, RayTaskError) as e:
            if isinstance(e, errors):
                return True
    return False
