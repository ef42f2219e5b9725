"""The elastic pool's driver side (relay_trainer/elastic.py) against a stand-in for Ray: what it asks
the autoscaler for, when a worker starts, joins (current weights first) and leaves, and where a lost
worker's shard goes (actors/supervision.py). No Ray runs here."""

import itertools
from types import SimpleNamespace

import pytest

import relay_trainer.elastic as elastic
import relay_trainer.followers as followers
import relay_trainer.pools as pools
from actors.supervision import Call, Supervisor
from relay.config import load_config
from relay.run import metric_keys as keys
from relay.run.elastic import SHRINK_AFTER

BUSY = {keys.ROLLOUT_S: 8.0, keys.STEP_S: 10.0}  # rollout holds the step up: grow
QUIET = {keys.ROLLOUT_S: 1.0, keys.STEP_S: 10.0}  # workers idle most of the step: shrink
ids = itertools.count()


class Ref:
    def __init__(self, value=None, done=False):
        self.value, self.done = value, done


class Handle:
    def __init__(self, node="node-a"):
        self._actor_id, self.node = next(ids), node
        self.__ray_ready__ = SimpleNamespace(remote=lambda: self.ready)
        self.node_id = SimpleNamespace(remote=lambda: Ref(self.node, True))
        self.ready = Ref(done=False)


class FakeRay:
    """What ElasticPool calls of Ray, recorded."""

    def __init__(self):
        self.started, self.killed, self.alive = [], [], {"node-a", "node-b"}

    def remote(self, cls):
        def make(*args):
            handle = Handle("node-b")
            self.started.append((handle, args))
            return handle

        return SimpleNamespace(options=lambda **kw: SimpleNamespace(remote=make))

    def wait(self, refs, num_returns, timeout, fetch_local=True):
        return [r for r in refs if r.done], [r for r in refs if not r.done]

    def get(self, ref, timeout=None):
        return ref.value

    def kill(self, handle, no_restart=True):
        self.killed.append(handle)

    def nodes(self):
        return [{"NodeID": n, "Alive": True} for n in self.alive]


@pytest.fixture
def pool(monkeypatch):
    return elastic_pool(monkeypatch)


def elastic_pool(monkeypatch, *overrides: str):
    fake, requests, groups = FakeRay(), [], {"made": [], "removed": []}
    monkeypatch.setattr(elastic, "ray", fake)
    monkeypatch.setattr(pools, "ray", fake)  # pools.create_group starts the workers
    monkeypatch.setattr(elastic, "request_resources", lambda bundles: requests.append(bundles))
    monkeypatch.setattr(followers, "placement_group", lambda b, **kw: groups["made"].append(b) or object())
    monkeypatch.setattr(elastic, "remove_placement_group", lambda g: groups["removed"].append(g))
    monkeypatch.setattr(elastic, "draining_nodes", lambda: fake.draining if hasattr(fake, "draining") else set())
    monkeypatch.setattr(pools, "PlacementGroupSchedulingStrategy", lambda *a, **kw: None)
    cfg = load_config(None, ["resources.rollout.count={min: 1, max: 2}", "training.prompts_per_step=4", *overrides])
    faults = SimpleNamespace(names={}, sent=[], reroute=None)
    faults.resend_weights = lambda w: faults.sent.append(w)
    base = Handle("node-a")
    actors = SimpleNamespace(
        rollout=[base], shared_weights=[], faults=faults, weight_lane=False, weight_broadcast=None,
        rollout_args=lambda i: ("settings", i),
    )  # fmt: skip
    made = groups["made"]
    return SimpleNamespace(
        pool=elastic.ElasticPool(cfg, actors, "run"), actors=actors, ray=fake, requests=requests, groups=made
    )


def test_grows_when_rollout_holds_the_step_up_and_joins_with_the_current_weights(pool):
    assert pool.pool.resize(BUSY) == {keys.ROLLOUT_WORKERS: 1.0, keys.ROLLOUT_WORKERS_WANTED: 2.0}
    assert len(pool.requests[-1]) == 3  # the learner's bundle and two rollout workers'
    ((handle, args),) = pool.ray.started
    assert args == ("settings", 1) and pool.actors.faults.names[handle._actor_id] == "run/rollout-1"
    assert pool.pool.resize(BUSY)[keys.ROLLOUT_WORKERS] == 1.0  # not up yet: nothing more asked for
    assert len(pool.ray.started) == 1
    handle.ready.done = True
    assert pool.pool.resize(BUSY)[keys.ROLLOUT_WORKERS] == 2.0
    assert pool.actors.faults.sent == [handle] and pool.actors.rollout[-1] is handle


def joined(pool):
    pool.pool.resize(BUSY)
    handle = pool.ray.started[-1][0]
    handle.ready.done = True
    pool.pool.resize(BUSY)
    assert len(pool.actors.rollout) == 2
    return handle


def test_shrinks_back_to_min_after_quiet_steps(pool):
    handle = joined(pool)
    for _ in range(SHRINK_AFTER - 1):
        assert pool.pool.resize(QUIET)[keys.ROLLOUT_WORKERS] == 2.0
    assert pool.pool.resize(QUIET) == {keys.ROLLOUT_WORKERS: 1.0, keys.ROLLOUT_WORKERS_WANTED: 1.0}
    assert pool.ray.killed == [handle] and len(pool.requests[-1]) == 2


def test_a_worker_on_a_draining_node_gets_no_more_work(pool):
    handle = joined(pool)
    pool.ray.draining = {"node-b"}
    pool.pool.resize({keys.ROLLOUT_S: 4.0, keys.STEP_S: 10.0})  # hold: neither grow nor shrink
    assert handle not in pool.actors.rollout and handle in pool.ray.killed


def test_a_lost_added_worker_shard_moves_to_a_live_one_with_its_seed(pool):
    handle = joined(pool)
    base = pool.actors.rollout[0]
    assert pool.pool.reroute(base) is None  # the first min workers: Ray restarts them
    assert pool.pool.reroute(handle) == (base, 1)
    assert pool.actors.rollout == [base]  # at once: the step's weight sync after the update must not wait for it
    pool.pool.resize({keys.ROLLOUT_S: 4.0, keys.STEP_S: 10.0})
    assert pool.actors.rollout == [base]


def test_the_supervisor_moves_a_shard_with_the_lost_workers_seed_index():
    faults, sent = Supervisor(1.0), []
    lost, taker = Handle(), Handle()
    faults.reroute = lambda actor: (taker, 7) if actor is lost else None
    submit = lambda i, w, **seed: sent.append((i, w, seed))  # noqa: E731
    call = Call(lost, lambda: submit(3, lost), "rollout-1 rollout shard", shard=True)
    assert faults._move(call, 3, submit) and call.actor is taker
    call.submit()
    assert sent == [(3, taker, {"seed_index": 7})]
    assert not faults._move(Call(taker, lambda: None, "rollout-0"), 0, submit)


def test_an_added_worker_lost_under_its_weight_load_leaves_the_pool_instead_of_being_waited_for():
    from relay_trainer.weights import _load_call

    faults, lost, first = Supervisor(1.0), Handle(), Handle()
    faults.reroute = lambda actor: (first, 1) if actor is lost else None  # the elastic pool's answer
    call = _load_call(faults, 1, lost, False, None, version=3)
    submit = call.submit
    assert call.move() and call.submit is not submit  # done: out of the pool it needs no weights
    assert not _load_call(faults, 0, first, False, None, version=3).move()  # the first min: Ray restarts it


def test_a_plain_count_is_a_fixed_pool():
    cfg = load_config(None, ["resources.rollout.count=2", "resources.colocate=false"])
    with elastic.rollout_pool(cfg, SimpleNamespace(), "run") as fixed:
        assert fixed.resize(BUSY) == {}


def test_an_added_worker_brings_its_own_environment_pool_and_takes_it_along(monkeypatch):
    follow = ["task.reward_actor=true", "resources.env.follow_rollout=true", "resources.colocate=false"]
    pool = elastic_pool(monkeypatch, *follow)
    pool.pool.resize(BUSY)
    (env, env_args), (worker, worker_args) = pool.ray.started  # the EnvPool first: the worker looks it up
    assert env_args[1] == 1 and worker_args == ("settings", 1)
    res = pool.pool.cfg.resources
    assert pool.groups == [[{"CPU": res.rollout.cpus}, {"CPU": res.env.cpus}]]  # one group: the worker's, its EnvPool's
    assert pool.actors.faults.names[env._actor_id] == "run/env-1"
    assert len(pool.requests[-1]) == 5  # the learner, two workers and an EnvPool each
    worker.ready.done = True
    pool.pool.resize(BUSY)
    for _ in range(SHRINK_AFTER):
        pool.pool.resize(QUIET)
    assert pool.ray.killed == [worker, env]
