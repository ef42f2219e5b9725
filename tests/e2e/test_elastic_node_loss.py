"""The elastic rollout pool (resources.rollout.count {min: 1, max: 2}) when a node joins and when one
is lost mid-step, on a two-raylet cluster in one test (ray.cluster_utils.Cluster, no autoscaler):
the test adds the node the pool's request asks for, as an autoscaler would, and later removes it
at once (its raylet and every process under it, killed) while its worker is in the pool.

The head holds the learner and the first rollout worker; the pool's second worker waits on its
placement group until the added node joins, takes the current weights and rolls out; its node then
dies, and the next step's shard for it is redone by another worker with the lost one's seed. The run's own
records say what happened: every step's trained episodes (samples/, logging.samples_every=1) hold
each group exactly rollout.n times, and rollout/workers (metrics.jsonl) went 1 -> 2 -> 1.
tests/e2e/test_elastic_pool.py and benchmarks/elastic.py do the same on Ray's real autoscaler.
"""

from __future__ import annotations

import time

import pytest
import ray

from benchmarks.elastic_records import lost_and_duplicated, read_metrics, step_episodes
from benchmarks.local_nodes import local_cluster
from relay.config import load_config

PROMPTS, N = 4, 4


def alive(name: str) -> bool:
    """Whether the GCS lists the actor as ALIVE: its constructor is done (needs no dashboard)."""
    return any(a["Name"] == name and a["State"] == "ALIVE" for a in ray._private.state.actors().values())


@pytest.fixture
def two_node_cluster():
    # the head holds the learner and the first rollout worker: no room for a second
    with local_cluster({"num_cpus": 2, "resources": {"rollout_node": 1}}) as (cluster, _, temp_dir):
        yield cluster, temp_dir


@pytest.mark.slow  # the pool's bookkeeping stays in the default tier: tests/unit/test_elastic_driver.py
def test_a_node_joins_the_pool_and_losing_it_loses_no_sample(two_node_cluster, tmp_path):
    from relay_trainer import loop

    cluster, temp_dir = two_node_cluster
    cfg = load_config(
        "configs/default.yaml",
        [
            "resources.rollout.count={min: 1, max: 2}",
            "resources.rollout.node_resource=rollout_node",
            "resources.rollout_timeout_s=120",  # a call that waits for a replacement fails in minutes, not an hour
            "task.reward_fn=tests.e2e.elastic_rewards:slow_arithmetic",  # rollout is most of each step: grow
            "training.steps=6", f"training.prompts_per_step={PROMPTS}", f"rollout.n={N}", "task.num_eval_rows=4",
            "training.eval_before=false", "checkpoint.every=0", "checkpoint.save_hf_model=false",
            "logging.console=false", "logging.samples_every=1", "logging.samples_per_write=100",
            f"run.output_dir={tmp_path}", "run.name=node-loss",
        ],
    )  # fmt: skip
    added, workers = [], []

    def report(step: int, metrics: dict) -> None:
        workers.append(int(metrics["rollout/workers"]))
        if metrics["rollout/workers_wanted"] == 2 and not added:  # the pool asks for room: a node joins
            added.append(cluster.add_node(num_cpus=1, resources={"rollout_node": 1}, temp_dir=temp_dir))
            # and the loop waits for the worker to start there: it joins at the next step's end however
            # slow this machine is, so the steps below are known (1 worker, 1, 2, 2, then 1 from the kill on)
            deadline = time.monotonic() + 240
            while not alive("node-loss/rollout-1"):
                assert time.monotonic() < deadline, "the added worker never started on the added node"
                time.sleep(0.5)
        elif workers[-2:] == [2, 2] and len(added) == 1:  # the joined worker has rolled out a step: its node goes
            # now, with the worker still in the pool: the next step's shard is sent to it and lost (a kill
            # timed into the rollout would land there too, or, on a busy machine, in the weight sync after it)
            cluster.remove_node(added[0], allow_graceful=False)  # the raylet and its workers, SIGKILL
            added.append(None)

    started = time.monotonic()
    loop.train(cfg, report=report)
    seconds = time.monotonic() - started

    run_dir = tmp_path / "node-loss"
    metrics = read_metrics(run_dir)
    assert len(metrics) == 6
    # joined one step after the pool asked (after step 1, while rollout holds the steps up), rolled out
    # two steps, its node lost before the next: 1, 2, 2, 1, 1, 1
    joined = workers.index(2)
    assert workers == [1] * joined + [2, 2] + [1] * (6 - joined - 2), workers
    # the step after the kill: its shard for the lost worker was redone by the other, with its seed
    retried = [m["faults/retried_shards"] for m in metrics]
    assert retried == [0] * (joined + 2) + [1] + [0] * (6 - joined - 3), retried
    assert lost_and_duplicated(step_episodes(run_dir), PROMPTS, N) == (0, 0)
    print(f"elastic node loss: workers per step {''.join(map(str, workers))}; run {seconds:.1f} s")
