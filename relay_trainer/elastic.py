"""The elastic rollout pool on the driver (resources.rollout.count: {min, max}; docs/cluster.md).

After each step the loop hands the step's metrics to `ElasticPool.resize`, which
  1. drops the workers it added whose node is draining or gone (they get no more work);
  2. decides how many workers it wants (relay/run/elastic.py) and asks Ray's autoscaler for room for
     them with `ray.autoscaler.sdk.request_resources`: every role's bundles, rollout's `wanted` times
     (the request is the cluster's whole size for the run, not an addition: the autoscaler counts
     what already runs against it);
  3. starts each missing worker on a placement group of its own bundle (and of the environment
     pool and tool executors that follow it, relay/config/roles.py), which waits for the room
     to appear (a new node, or an old one freed); the worker is created at once and Ray starts it
     when its group is placed;
  4. lets a started worker roll out once its constructor is done and it holds the current weights
     (sent through the object store, tagged with the current version, before its first rollout);
  5. stops the workers beyond `wanted`, newest first: they leave `actors.rollout` (no more work),
     are killed and their groups removed, and the lower request lets the autoscaler's idle
     timeout take the node back.

The run's first `min` workers are actor_pools'; they are restarted by Ray as always. The workers
added here are let go instead: one that dies, or whose node drains or leaves, is dropped, and a
sync step's shard lost with it is redone on another worker with its seed (Supervisor.reroute,
actors/supervision.py). In the overlapped modes the producer's calls in flight are drained before
a worker leaves (its calls index the workers); a worker whose node is gone, and the calls lost
with it, go through the producer's own recovery (Ray restarts the worker where its group is placed
again), as the first min workers' do.
"""

from __future__ import annotations

import dataclasses
import time
from contextlib import contextmanager
from dataclasses import dataclass

import ray
from ray.autoscaler.sdk import request_resources
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
from ray.util.placement_group import remove_placement_group

from relay.config import Config
from relay.config.elastic import count_range, is_elastic, sync_counts
from relay.run import metric_keys as keys
from relay.run.elastic import PoolSize, demand, resize, usable
from relay.run.progress import say
from relay_trainer.followers import places_in, worker_group
from relay_trainer.pools import EnvPool, RolloutWorker, actor_bundles, actor_name, create_group, create_tool_executors
from relay_trainer.weights import WEIGHT_LANE

PING_S = 10.0  # an added worker's node id and weights, asked once it is up


@dataclass
class Added:
    """A worker this pool started: its own placement group, and where it is in its life."""

    index: int  # its worker index (constructor argument): names it and seeds its sampling
    handle: object
    group: object
    ready: object  # its constructor's end (a ref)
    state: str = "starting"  # starting -> standby (up, not rolling out) <-> rolling -> gone
    node: str | None = None
    followers: list = dataclasses.field(default_factory=list)  # its own EnvPool and tool executors, in its group


class ElasticPool:
    def __init__(self, cfg: Config, actors, run_name: str):
        self.cfg, self.actors, self.run_name = cfg, actors, run_name
        self.count = count_range(cfg.resources.rollout.count)
        self.sync = cfg.training.mode == "sync"
        # the counts the pool rolls out on (sync: those that split a step's prompts evenly)
        self.counts = (
            sync_counts(self.count, cfg.training.prompts_per_step)
            if self.sync
            else list(range(self.count.min, self.count.max + 1))
        )
        self.size = PoolSize(self.count.min)
        self.added: list[Added] = []
        self.next_index = len(actors.rollout)
        self.producer = None  # the overlapped modes' RolloutProducer, set by the loop once it exists
        self.moved = 0  # for reroute: spreads lost shards over the workers
        actors.faults.reroute = self.reroute

    # -- once per step ---------------------------------------------------------------------------

    def resize(self, metrics: dict[str, float]) -> dict[str, float]:
        """Read one step's metrics, move the pool toward the workers they call for; its metrics."""
        for extra in self.added:  # dropped by reroute in the step: out of actors.rollout now
            if extra.state == "gone":
                self._leave(extra)
        self._drop_lost()
        self._admit()
        signal = demand(self.cfg.training.mode, metrics, self.cfg.training.prompts_per_step)
        self.size = resize(self.size, self.counts, signal, self._up())
        for extra in [a for a in reversed(self.added) if a.state != "gone"][: self._surplus()]:
            self._stop(extra, f"demand fell (wanted {self.size.wanted})")
        self._request(self.size.wanted)
        while self.count.min + len(self._alive()) < self.size.wanted:
            self._start()
        self._balance()
        return {
            keys.ROLLOUT_WORKERS: float(len(self.actors.rollout)),
            keys.ROLLOUT_WORKERS_WANTED: float(self.size.wanted),
        }

    def _alive(self) -> list[Added]:
        return [a for a in self.added if a.state != "gone"]

    def _up(self) -> int:
        """Workers able to roll out: the first min, and the added ones that are up."""
        return self.count.min + sum(a.state in ("standby", "rolling") for a in self.added)

    def _surplus(self) -> int:
        return max(0, self.count.min + len(self._alive()) - self.size.wanted)

    def _request(self, workers: int) -> None:
        """Room for every role, with `workers` rollout workers (replaces the last request)."""
        request_resources(bundles=self.bundles(workers))

    def bundles(self, workers: int) -> list[dict[str, float]]:
        res = self.cfg.resources
        rollout = dataclasses.replace(res.rollout, count=workers)
        return actor_bundles(dataclasses.replace(self.cfg, resources=dataclasses.replace(res, rollout=rollout)))

    # -- the workers' lives ------------------------------------------------------------------------

    def _start(self) -> None:
        """A worker on a placement group of its own, with the roles that follow it (relay/config/roles.py):
        Ray starts them once the group is placed."""
        index, cfg, run = self.next_index, self.cfg, self.run_name
        self.next_index += 1
        group = worker_group(cfg, run, index)
        where = places_in(group, cfg, index)  # role -> its actors' places in the group
        followers = create_tool_executors(cfg, run, [], where["tools"], wait=False) if "tools" in where else []
        if "env" in where:  # started before the worker, which looks them up by name
            env_args = lambda i: (cfg.task, i)  # noqa: E731
            followers += create_group(EnvPool, "env", cfg.resources.env, run, env_args, [], places=where["env"])
        lane = {WEIGHT_LANE: 1} if self.actors.weight_lane else None  # rollout.partial, as actor_pools makes them
        [handle] = create_group(
            RolloutWorker, "rollout", cfg.resources.rollout, run, self.actors.rollout_args, [],
            cfg.resources.max_restarts,  # the producer's recovery waits for Ray's replacement
            lane, places=where["rollout"],
        )  # fmt: skip
        # the dashboard's names of [handle, *followers], for the Supervisor's lines
        names = [actor_name(run, role, i) for role in ("rollout", "tools", "env") for _, _, i in where.get(role, [])]
        for actor, name in zip([handle, *followers], names):
            self.actors.faults.names[actor._actor_id] = name
        self.added.append(Added(index, handle, group, handle.__ray_ready__.remote(), followers=followers))
        say(f"elastic pool: asking for rollout-{index} (wanted {self.size.wanted})")

    def _admit(self) -> None:
        """Workers whose constructor is done: their node, then standby (they get the weights on joining)."""
        starting = [a for a in self.added if a.state == "starting"]
        if not starting:
            return
        done, _ = ray.wait([a.ready for a in starting], num_returns=len(starting), timeout=0, fetch_local=False)
        for extra in [a for a in starting if a.ready in done]:
            try:
                ray.get(extra.ready)
                extra.node = ray.get(extra.handle.node_id.remote(), timeout=PING_S)
            except (RayActorError, RayTaskError, GetTimeoutError) as e:
                self._stop(extra, f"it failed to start ({type(e).__name__})")
                continue
            extra.state = "standby"
            say(f"elastic pool: rollout-{extra.index} is up on node {extra.node[:8]}")

    def _balance(self) -> None:
        """Roll out on the largest usable count of the workers up: standby ones join (current weights
        first), surplus rolling ones step back (newest first)."""
        target = usable(self._up(), self.counts) - self.count.min
        rolling = [a for a in self.added if a.state == "rolling"]
        for extra in rolling[target:][::-1]:
            self._leave(extra)
            extra.state = "standby"
        for extra in [a for a in self.added if a.state == "standby"][: max(0, target - len(rolling))]:
            try:
                self.actors.faults.resend_weights(extra.handle)  # the current version, by object store
            except (RayActorError, GetTimeoutError) as e:
                self._stop(extra, f"it did not take the weights ({type(e).__name__})")
                continue
            self._join(extra)

    def _join(self, extra: Added) -> None:
        actors = self.actors
        actors.rollout.append(extra.handle)
        if actors.shared_weights:  # it never mapped the learner's buffers: the object store
            actors.shared_weights.append(False)
        if self.producer is not None:  # its per-worker lists follow actors.rollout
            self.producer.lives.append(0)
            self.producer.quiet_since.append(time.monotonic())
        extra.state = "rolling"
        if actors.weight_broadcast is not None:  # formed again, with it, before the next broadcast
            actors.weight_broadcast.form_again()
        say(f"elastic pool: rollout-{extra.index} joins ({len(actors.rollout)} rolling out)")

    def _leave(self, extra: Added) -> None:
        """No more work for `extra`: out of actors.rollout (the producer's calls in flight drained first)."""
        actors = self.actors
        if extra.handle not in actors.rollout:
            return
        if self.producer is not None:
            self.producer.drain()  # its calls name workers by position
        at = actors.rollout.index(extra.handle)
        del actors.rollout[at]
        if at < len(actors.shared_weights):
            del actors.shared_weights[at]
        if self.producer is not None:
            del self.producer.lives[at], self.producer.quiet_since[at]
        if actors.weight_broadcast is not None:  # formed again, without it, before the next broadcast
            actors.weight_broadcast.form_again()

    def _stop(self, extra: Added, why: str) -> None:
        self._leave(extra)
        release(extra)
        say(f"elastic pool: rollout-{extra.index} stops: {why}")

    def _drop_lost(self) -> None:
        """Added workers whose node is draining or no longer alive get no more work."""
        placed = [a for a in self.added if a.node is not None and a.state != "gone"]
        if not placed:
            return
        alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        draining = draining_nodes()
        for extra in placed:
            if extra.node not in alive and self.producer is not None:
                # its calls in flight fail into the producer's recovery, which waits for Ray's replacement
                # (where its group is placed again): draining them here first would wait just as long
                say(f"elastic pool: rollout-{extra.index}'s node {extra.node[:8]} is gone; Ray restarts it")
                extra.node = None
            elif extra.node not in alive or extra.node in draining:
                self._stop(extra, f"its node {extra.node[:8]} is {'draining' if extra.node in alive else 'gone'}")

    def reroute(self, lost) -> tuple[object, int] | None:
        """Supervisor.reroute: an added worker lost under a sync step's shard is dropped, and another
        rolling worker redoes the shard with the lost one's seed index; None for the first min workers
        (Ray restarts them)."""
        extra = next((a for a in self.added if a.handle._actor_id == lost._actor_id and a.state != "gone"), None)
        if extra is None:
            return None
        release(extra)
        if self.producer is None:  # sync: out of actors.rollout now, or the step's weight sync would wait for it
            self._leave(extra)  # the step's other calls hold their own workers; shards were split already
        # (the overlapped modes' producer drains before a worker leaves: resize does it at the step's end)
        lost_ids = {a.handle._actor_id for a in self.added if a.state == "gone"}
        takers = [w for w in self.actors.rollout if w._actor_id not in lost_ids]
        self.moved += 1
        return takers[self.moved % len(takers)], extra.index

    def close(self) -> None:
        """Every added worker stopped, and the request withdrawn (the autoscaler may take the nodes back)."""
        for extra in self._alive():
            release(extra)
        for extra in self.added:  # dropped mid-step by reroute, still listed
            if extra.handle in self.actors.rollout:
                self.actors.rollout.remove(extra.handle)
        try:
            request_resources(bundles=[])
        except Exception as e:  # noqa: BLE001  (a cluster already gone: nothing left to withdraw)
            say(f"elastic pool: could not withdraw the resource request ({type(e).__name__})")


def release(extra: Added) -> None:
    """`extra` and its followers killed for good (not restarted), its group's room back to the autoscaler."""
    extra.state = "gone"
    for actor in [extra.handle, *extra.followers]:
        ray.kill(actor)
    remove_placement_group(extra.group)


class FixedPool:
    """A plain resources.rollout.count: nothing to resize, no metric added."""

    producer = None

    def resize(self, metrics: dict[str, float]) -> dict[str, float]:
        return {}

    def close(self) -> None:
        pass


@contextmanager
def rollout_pool(cfg: Config, actors, run_name: str):
    """The run's rollout pool: elastic for a range of counts, else fixed; stopped on exit."""
    pool = ElasticPool(cfg, actors, run_name) if is_elastic(cfg.resources.rollout.count) else FixedPool()
    try:
        yield pool
    finally:
        pool.close()


def draining_nodes() -> set[str]:
    """Hex ids of the nodes Ray is draining (the autoscaler's idle or preemption drain)."""
    try:
        return set(ray._private.state.state.get_draining_nodes())  # Ray 2.60: no public API for it
    except Exception:  # noqa: BLE001  (older GCS: no draining state, only dead nodes are seen)
        return set()
