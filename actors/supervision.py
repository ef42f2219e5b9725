"""Remote calls with a deadline, retried on the replacement of an actor that died or hung.

Rollout workers, environment pools and tool executors are created with Ray `max_restarts`
(relay_trainer/pools.py), so Ray rebuilds a lost one by running its constructor again: the engine is
reloaded from the model path, which is why a restarted rollout worker gets the current weights
and weight version re-sent (`Call.on_restart`) before the work it owned is retried.

Ray 2.60's failure semantics shape this module: a call in flight when its actor restarts
raises ActorUnavailableError or ActorDiedError (both RayActorError); ActorDiedError from a
ping means the actor is gone for good (its restarts are used up); a hung synchronous method
cannot be cancelled, only `ray.kill(actor, no_restart=False)` frees the actor (it is then
restarted). Tasks are not retried by Ray (`max_task_retries` 0): only the caller knows what a
retry needs first (weights) and whether it is safe (it always is here: a rollout shard is
seeded by (run, step, worker), so the redone shard samples what the lost call would have; tool
calls and scoring are pure; environment steps are redone as a whole shard, since the episodes'
environments died with their pool).

The learner, reference, critic and reward model are not restarted (their state is the run's):
their calls go through `Supervisor.get`, whose deadline kills the hung actor for good and stops
the run as a dead learner does (ActorLost: the last checkpoint, `--resume`, `resources.auto_resume`).

A caller that waits past a call's deadline kills the actor, so deadlines must never fire on a
healthy run: `resources.call_timeout_s` (environment, tool, scoring and weight calls),
`resources.rollout_timeout_s` (a whole rollout shard; also the wait for a restarted actor, whose
constructor may load a model) and `resources.update_timeout_s` (a model's pass over the whole
batch, an update, a checkpoint) default to generous values.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from actors.restarts import process_id, wait_restarted
from relay.failures import ActorLost, CallRaised, raised_line

# A call that fails on this many fresh replacements in a row is not bad luck: the run stops.
ATTEMPTS_PER_CALL = 4

# Counted events (metrics `faults/<name>`, per step; Supervisor.totals over the run):
#   actor_errors    calls whose actor died or restarted under them
#   timeouts        calls past their deadline (the actor was then killed: restarted, or for good in `get`)
#   restarts        replacements a caller waited for and used (each time one came back)
#   retried_shards  rollout shards redone (same prompts, same seed) on a replacement
#   retried_calls   other calls redone (tool batches, scoring, weight loads)
#   call_errors     calls that raised in relay's own code (not a user's environment or reward: those
#                   are counted data); redone on the same actor, which is alive
#   duplicated_samples  samples of one batch with the same (group, index): a check, always 0
#   unserializable_samples  episodes a rollout worker could not pickle, returned as failed-sample
#                   records (actors/serializable.py) instead of failing the rollout's return
#   learner_restores  learners restarted by Ray and restored in place (relay_trainer/learner_recovery.py)
FAULT_COUNTS = tuple(
    "actor_errors timeouts restarts retried_shards retried_calls call_errors duplicated_samples "
    "unserializable_samples learner_restores".split()
)


class ShardLost(RuntimeError):
    """Raised by a rollout worker whose environment pool died or hung under the shard's episodes:
    their environments are gone, so the shard is redone as a whole (the driver retries it)."""

    def __init__(self, message: str, counts: dict[str, float] | None = None):
        super().__init__(message)
        self.counts = dict(counts or {})  # what the worker counted before giving the shard up

    def __reduce__(self):  # keeps `counts` through pickling (Ray sends the error to the caller)
        return (ShardLost, (str(self), self.counts))


@dataclass
class Call:
    """One remote call that may be retried: `submit()` sends it again (to the same handle: Ray
    routes it to the replacement). `on_restart` runs on a restarted actor first (the weights);
    `valid(result)` false means the actor restarted between calls and answered from a fresh state."""

    actor: object
    submit: Callable[[], object]
    what: str  # names the actor and the work in the log line: "rollout-1 rollout shard"
    shard: bool = False  # a rollout shard (counted as retried_shards), else a call
    on_restart: Callable[[], None] | None = None
    valid: Callable[[object], bool] | None = None
    # Instead of waiting for a replacement: sends the work to another actor (rebinding `actor` and
    # `submit`) and says whether it did (an elastic pool's worker that left: relay_trainer/elastic.py)
    move: Callable[[], bool] | None = None


class Supervisor:
    """Makes the calls, counts the faults. One per process that calls actors (the driver, and
    each rollout worker for its environment and tool calls)."""

    def __init__(
        self,
        timeout_s: float,
        rollout_timeout_s: float = 3600.0,
        log: Callable[[str], None] | None = None,
        update_timeout_s: float = 3600.0,
    ):
        self.timeout_s, self.rollout_timeout_s, self.update_timeout_s = timeout_s, rollout_timeout_s, update_timeout_s
        self.names: dict = {}  # actor id -> "<run>/<role>-<i>", for the log line of a hung call
        # (a ref to the learner's payload, or a function that makes one; its version): what the
        # rollout workers hold, re-sent through the object store to one that restarted
        self.weights: tuple[object, int] | None = None
        self.restarted_workers: set = set()  # their shared-memory buffers are gone: object store from now on
        self.worker_restarts = 0
        # actor ids that `wait` kills to be restarted past a deadline: the caller restores their
        # state (the learner: relay_trainer/learner_recovery.py); every other actor it kills for good
        self.restorable: set = set()
        # a lost rollout worker -> (a live worker to redo its shard, the lost one's seed index), or None to
        # wait for Ray's replacement: set by an elastic pool, whose added workers are not waited for
        self.reroute: Callable[[object], tuple[object, int] | None] | None = None
        self.counts: Counter[str] = Counter()
        self.totals: Counter[str] = Counter()
        self.log = log or (lambda line: print(line, flush=True))

    def count(self, name: str, k: float = 1) -> None:
        self.counts[name] += k
        self.totals[name] += k

    def add(self, counts: dict[str, float]) -> None:
        """Counts made elsewhere (a rollout worker's, returned with its shard)."""
        for name, k in counts.items():
            self.count(name.removeprefix("faults/"), k)

    def take(self) -> dict[str, float]:
        """The counts since the last take, as metrics (every name, zeros too)."""
        out = {f"faults/{name}": float(self.counts[name]) for name in FAULT_COUNTS}
        self.counts.clear()
        return out

    def get_all(self, calls: list[Call], timeout_s: float | None = None) -> list:
        """Every call's result, in order. The calls run at once; each has its own deadline from
        when it was (re)sent. A call whose actor dies or hangs is redone on the replacement."""
        return self.start_all(calls, timeout_s).results()

    def start_all(self, calls: list[Call], timeout_s: float | None = None) -> PendingCalls:
        """get_all's calls, sent and not waited for: `ready()` between other work, then `results()`."""
        return PendingCalls(self, calls, self.timeout_s if timeout_s is None else timeout_s)

    # -- roles that are not restarted: learner, reference, critic

    def get(self, refs, handles, what: str, long: bool = False):
        """ray.get(refs) within the deadline (`long`: resources.update_timeout_s, else call_timeout_s)."""
        self.wait(refs, handles, what, long)
        try:
            return ray.get(refs)
        except RayTaskError as e:  # their state is the run's: it stops, resumable, as if they had died
            lost = isinstance(getattr(e, "cause", e), ActorLost)  # a rollout worker's, passed on
            raise (e if lost else CallRaised(f"{what} raised {raised_line(e)}")) from None

    def wait(self, refs, handles, what: str, long: bool = False) -> None:
        """Wait until `refs` (one ref, or a list made by `handles`, one handle each) are done, without
        fetching them here (a weight payload stays in the object store). Past the deadline the actors
        of the calls still running are killed for good (a hung synchronous method cannot be cancelled)
        and ActorLost stops the run as their death would: the last checkpoint and `--resume` are
        printed, and `resources.auto_resume` resumes from it. Errors of finished calls raise in get."""
        refs, handles = (refs, handles) if isinstance(refs, list) else ([refs], [handles])
        if not refs:  # e.g. no rollout worker reads the shared-memory weights
            return
        timeout, key = (self.update_timeout_s, "update_timeout_s") if long else (self.timeout_s, "call_timeout_s")
        _, pending = ray.wait(refs, num_returns=len(refs), timeout=timeout, fetch_local=False)
        if not pending:
            return
        hung = list({a._actor_id: a for r, h in zip(refs, handles) if r in pending for a in role_actors(h)}.values())
        names = ", ".join(self.names.get(a._actor_id, f"actor {a._actor_id.hex()[:8]}") for a in hung)
        line = f"{names} {what}: no answer within {timeout:g}s (resources.{key})"
        self.count("timeouts")
        restored = all(a._actor_id in self.restorable for a in hung)
        self.log(f"relay: fault: {line}; killing it, {'to restore it' if restored else 'the run stops'}")
        for actor in hung:
            ray.kill(actor, no_restart=actor._actor_id not in self.restorable)
        raise ActorLost(f"{line}; killed")

    def _recover(self, call: Call, attempt: int, why: str) -> None:
        """Wait for the replacement (a ping that queues behind its constructor), then rebuild its state;
        or, for work that can move, send it to another actor."""
        if call.move is not None and call.move():
            self.log(f"relay: fault: {call.what}: actor {why}; it left the pool" + (", its work moved" if call.shard else ""))
            return
        if not wait_restarted(call.actor, self.rollout_timeout_s):
            raise ActorLost(f"{call.what}: the actor is gone ({why}, and no replacement answered)")
        self.count("restarts")
        self.log(f"relay: fault: {call.what}: actor {why}; restarted, redoing its work (attempt {attempt + 1})")
        self._rebuild(call)

    def _rebuild(self, call: Call) -> None:
        if call.on_restart is not None:
            try:
                call.on_restart()
            except (RayActorError, GetTimeoutError) as e:  # the retry meets the same fault and is handled there
                self.log(f"relay: fault: {call.what}: rebuilding its state failed ({type(e).__name__})")

    # -- the rollout workers' work: weights in, shards out

    def resend_weights(self, worker) -> None:
        self.restarted_workers.add(worker._actor_id)
        self.worker_restarts += 1  # a broadcast group must be formed again (relay_trainer/weights.py)
        if self.weights is not None:
            weights, version = self.weights
            weights = weights() if callable(weights) else weights
            ray.get(worker.update_weights.remote(weights, version), timeout=self.timeout_s)

    def reads_shared_memory(self, worker, mapped: bool) -> bool:
        """A worker that mapped the learner's shared buffers, unless it restarted since."""
        return mapped and worker._actor_id not in self.restarted_workers

    def on_current_weights(self, result) -> bool:
        """A shard sampled by a worker that restarted between calls holds version-0 samples: redo it."""
        samples, _ = result
        return self.weights is None or all(s.weight_version == self.weights[1] for s in samples)

    def rollout_shards(self, workers: list, submit: Callable[[int, object], object], restore=None) -> list:
        """`submit(i, worker)` sends worker i its shard; each result as it returned. A lost or
        stale shard is redone with the same arguments (so the same seed) on the replacement, after
        the current weights are re-sent (a colocated worker: after `restore(what)` restored it as
        the learner). Worker-side fault counts (`faults/*`) are taken here."""
        return self.shard_results(self.start_rollout_shards(workers, submit, restore).results())

    def start_rollout_shards(self, workers: list, submit, restore=None, since: int | None = None) -> PendingCalls:
        """rollout_shards' calls, sent and supervised the same way but not waited for; their
        `results()` go through `shard_results`. `since`: a shard is stale only on weights older than
        that version (a fresh replacement's), for results read after later syncs (an evaluation beside training)."""
        since_ok = lambda result: all(s.weight_version >= since for s in result[0])  # noqa: E731
        valid = self.on_current_weights if since is None else since_ok
        calls = [
            Call(
                w,
                lambda i=i, w=w: submit(i, w),
                f"rollout-{i} rollout shard",
                shard=True,
                on_restart=lambda w=w: self.resend_weights(w) if restore is None else restore("rollout shard"),
                valid=valid,
            )
            for i, w in enumerate(workers)
        ]
        for i, call in enumerate(calls):  # an elastic pool's worker that is lost: the shard moves, seed and all
            call.move = None if restore is not None else lambda i=i, call=call: self._move(call, i, submit)
        return self.start_all(calls, self.rollout_timeout_s)

    def shard_results(self, results: list) -> list:
        for _, metrics in results:
            self.add({k: v for k, v in metrics.items() if k.startswith("faults/")})
        keys = [(s.group_id, s.meta.get("episode_id", "").rsplit("-", 1)[-1]) for r in results for s in r[0]]
        self.count("duplicated_samples", len(keys) - len(set(keys)))
        return results

    def _move(self, call: Call, i: int, submit: Callable[..., object]) -> bool:
        """Shard i of a lost worker, to the live worker `reroute` names, sampled with the lost one's seed."""
        taker = self.reroute(call.actor) if self.reroute is not None else None
        if taker is None:
            return False
        worker, seed_index = taker
        call.actor, call.submit = worker, lambda: submit(i, worker, seed_index=seed_index)
        call.on_restart = lambda: self.resend_weights(worker)
        return True

    # -- a rollout worker's calls to its environment pool

    def env_call(self, pool, submit: Callable[[], object], what: str):
        """An environment call; if the pool dies or hangs under it, the shard's episodes are gone with
        it: once the pool is back this raises ShardLost, and the driver redoes the shard."""
        try:
            return ray.get(submit(), timeout=self.timeout_s)
        except GetTimeoutError:
            self.count("timeouts")
            self.log(f"relay: fault: {what}: no answer within {self.timeout_s:g}s; killing the pool to restart it")
            ray.kill(pool, no_restart=False)
            why = "hung"
        except RayActorError as e:
            self.count("actor_errors")
            why = type(e).__name__
        if not wait_restarted(pool, self.rollout_timeout_s):
            raise ActorLost(f"{what}: the environment pool is gone ({why}, and no replacement answered)")
        self.count("restarts")
        raise ShardLost(f"{what}: environment pool {why}, restarted; redoing the shard", self.take())


class PendingCalls:
    """Calls sent at once (Supervisor.start_all), each with its own deadline from when it was
    (re)sent. `ready()` looks without waiting and `results()` waits; either way a call whose actor
    died or hung, or that answered from a fresh state, is redone on the replacement."""

    def __init__(self, faults: Supervisor, calls: list[Call], timeout: float):
        self.faults, self.calls, self.timeout = faults, calls, timeout
        self.refs = [c.submit() for c in calls]
        self.sent = [time.monotonic()] * len(calls)
        self.attempts = [1] * len(calls)
        self.done: dict[int, object] = {}

    def ready(self) -> bool:
        """Whether every result is in; a call that failed or passed its deadline is handled now."""
        for i, ref in enumerate(self.refs):
            if i in self.done:
                continue
            finished, _ = ray.wait([ref], num_returns=1, timeout=0, fetch_local=False)
            if finished or time.monotonic() >= self.sent[i] + self.timeout:
                self._settle(i)
        return len(self.done) == len(self.calls)

    def results(self) -> list:
        """Every call's result, in order, waited for."""
        for i in range(len(self.calls)):
            while i not in self.done:
                self._settle(i)
        return [self.done[i] for i in range(len(self.calls))]

    def _settle(self, i: int) -> None:
        """Wait for call i until its deadline: its result, or the call redone (ActorLost after
        ATTEMPTS_PER_CALL tries)."""
        faults, call, attempt = self.faults, self.calls[i], self.attempts[i]
        try:
            result = ray.get(self.refs[i], timeout=max(0.0, self.sent[i] + self.timeout - time.monotonic()))
            if call.valid is None or call.valid(result):
                self.done[i] = result
                return
            faults.log(f"relay: fault: {call.what}: the actor had restarted (fresh state); redoing it")
            faults.count("restarts")
            faults._rebuild(call)
        except GetTimeoutError:
            faults.count("timeouts")
            faults.log(
                f"relay: fault: {call.what}: no answer within {self.timeout:g}s; killing the actor to restart it"
            )
            ray.kill(call.actor, no_restart=False)
            faults._recover(call, attempt, "hung")
        except ShardLost as lost:
            lost = getattr(lost, "cause", lost)  # Ray's error wraps the worker's ShardLost as its cause
            faults.add(lost.counts)
            faults.log(f"relay: fault: {call.what} lost: {lost}")
        except RayActorError as e:
            faults.count("actor_errors")
            faults._recover(call, attempt, type(e).__name__)
        except RayTaskError as e:
            faults.count("call_errors")
            faults.log(f"relay: fault: {call.what} raised {raised_line(e)}; redoing it")
            if attempt >= ATTEMPTS_PER_CALL:
                raise ActorLost(f"{call.what} raised {attempt} times in a row: {raised_line(e)}") from None
        if attempt >= ATTEMPTS_PER_CALL:
            raise ActorLost(f"{call.what} failed on {attempt} replacements in a row")
        self.attempts[i] = attempt + 1
        faults.count("retried_shards" if call.shard else "retried_calls")
        self.refs[i], self.sent[i] = call.submit(), time.monotonic()


class EnvPoolCalls:
    """A rollout worker's reset / step / close on its environment pool, each with a deadline
    (Supervisor.env_call). The episodes live in the pool, so a pool that restarted under them
    (in a call, or between two: then it no longer knows their ids) loses the shard: ShardLost."""

    def __init__(self, pool, faults: Supervisor, what: str):
        self.pool, self.faults, self.what = pool, faults, what
        self.pid: int | None = None  # the pool's process when the episodes began

    def _pid(self) -> int:
        return self.faults.env_call(self.pool, lambda: self.pool.__ray_call__.remote(process_id), f"{self.what} ping")

    def reset(self, episode_ids: list[str], rows: list[dict]):
        self.pid = self._pid()
        return self.faults.env_call(self.pool, lambda: self.pool.reset.remote(episode_ids, rows), f"{self.what} reset")

    def step(self, episode_ids: list[str], actions: list[str]):
        return self._known(lambda: self.pool.step.remote(episode_ids, actions), "step")

    def close(self, episode_ids: list[str]) -> None:
        self._known(lambda: self.pool.close.remote(episode_ids), "close")

    def score(self, samples: list):
        """Rewards from the pool that ran the episodes: one that restarted since has lost their
        environments, which the reward function gets, so the shard is lost with them."""
        if self.pid is not None and self._pid() != self.pid:
            self.faults.count("restarts")
            raise ShardLost(
                f"{self.what} score: the pool restarted after the episodes; redoing the shard", self.faults.take()
            )
        return self.faults.env_call(self.pool, lambda: self.pool.score.remote(samples), f"{self.what} score")

    def _known(self, submit: Callable[[], object], what: str):
        try:
            return self.faults.env_call(self.pool, submit, f"{self.what} {what}")
        except KeyError:  # EnvRunner: an episode id it does not hold; a restarted pool holds none
            if self._pid() == self.pid:
                raise  # the same process: a programming error, not a fault
            self.faults.count("restarts")
            raise ShardLost(
                f"{self.what} {what}: the pool restarted between calls; redoing the shard", self.faults.take()
            ) from None


def role_actors(handle) -> list:
    """The Ray actors behind a role's handle: an actor's handle is its own; a driver-side handle that
    stands for others names them with `ray_actors()` (relay_trainer/rank_group.py: a rank group's
    ranks; relay_trainer/lora_reference.py: a LoRA run's reference is its learner). Looked up on the
    class, where an actor handle has none (its attributes are its remote methods)."""
    stands_for = getattr(type(handle), "ray_actors", None)
    return stands_for(handle) if stands_for is not None else [handle]
