"""A learner whose node dies inside its update (the raylet and every process under it, SIGKILL) is
restored in place once a node with its label is back, on a two-raylet cluster in one test
(ray.cluster_utils.Cluster, no autoscaler): the test adds the node again some seconds after the
kill, as an autoscaler or an operator would.

The head holds the driver and the rollout worker; the learner goes to the node that declares
`learner_node` (resources.learner.node_resource). In step 3's update (after the step-2 checkpoint)
the learner marks a file and sleeps; the test then removes its node. Until a node with the label
joins, the run waits and says so in one line; then Ray places the learner's placement group again,
restarts the actor there, and the driver restores it from the checkpoint (relay_trainer/learner_recovery.py).
The run's own records say what happened: every step's trained episodes (samples/) hold each group
exactly rollout.n times, and faults/learner_restores counts the restore.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import ray

from benchmarks.elastic_records import lost_and_duplicated, read_metrics, step_episodes
from benchmarks.local_nodes import local_cluster
from relay.config import load_config

PROMPTS, N, STEPS = 4, 4, 4
KILLED_AFTER = 2  # steps logged; the next step's update is where the learner's node dies
BACK_AFTER_S = 5.0  # seconds from the GCS marking the lost node dead to a node with the label joining
LABEL = {"learner_node": 1}


@pytest.fixture
def learner_node_cluster():
    # the head's one CPU is the rollout worker's, pinned there: it would take the learner's node's CPU
    head = {"num_cpus": 1, "resources": {"rollout_node": 1}}
    with local_cluster(head, ({"num_cpus": 1, "resources": LABEL},)) as (cluster, [node], temp_dir):
        yield cluster, node, temp_dir


def hold_in_loss(marker: str):
    """Made in a function: Ray pickles it by value (an actor cannot import this test module). The
    learner's next loss marks `marker` and sleeps: its node is removed meanwhile."""

    def patch(self):
        def loss(micro):
            Path(marker).touch()
            time.sleep(600)

        self._actor._loss = loss  # the Learner behind its stand-in (relay_trainer/actor_class.py)

    return patch


# Slow: two model loads of the learner, the GCS's 15 s to mark the killed node dead, and the node's
# start; about 7 minutes on 2 cores shared with another training run
@pytest.mark.slow
def test_a_learner_lost_with_its_node_waits_for_one_and_is_restored(learner_node_cluster, tmp_path, capsys):
    from relay_trainer import loop

    cluster, node, temp_dir = learner_node_cluster
    name, marker = "learner-node", tmp_path / "in-update"
    cfg = load_config(
        "configs/default.yaml",
        [
            "resources.colocate=false",  # the learner actor alone, on its own node
            "resources.learner.node_resource=learner_node", "resources.rollout.node_resource=rollout_node",
            "resources.rollout_timeout_s=300",  # the wait for the node: fails in minutes, not an hour
            f"training.steps={STEPS}", f"training.prompts_per_step={PROMPTS}", f"rollout.n={N}",
            "task.num_eval_rows=4", "training.eval_before=false", "checkpoint.every=2",
            "checkpoint.save_hf_model=false", "logging.console=false", "logging.samples_every=1",
            "logging.samples_per_write=100", f"run.output_dir={tmp_path}", f"run.name={name}",
        ],
    )  # fmt: skip
    times: dict[str, float] = {}
    done = threading.Event()

    def lose_and_add_back() -> None:
        while not marker.exists():
            time.sleep(0.1)
        cluster.remove_node(node, allow_graceful=False)  # the raylet and its workers, SIGKILL
        times["killed"] = time.monotonic()
        while any(n["NodeID"] == node.node_id and n["Alive"] for n in ray.nodes()):  # its health checks fail
            time.sleep(0.2)
        times["dead"] = time.monotonic()
        time.sleep(BACK_AFTER_S)
        cluster.add_node(num_cpus=1, resources=LABEL, temp_dir=temp_dir)
        times["back"] = time.monotonic()
        done.wait()  # Ray's processes die with the thread that started them (PR_SET_PDEATHSIG)

    chaos = threading.Thread(target=lose_and_add_back, daemon=True)

    def report(step: int, metrics: dict) -> None:
        if step == KILLED_AFTER:
            learner = ray.get_actor(f"{name}/learner-0", namespace="relay")
            ray.get(learner.__ray_call__.remote(hold_in_loss(str(marker))))
            chaos.start()
        elif step == KILLED_AFTER + 1:
            times["restored"] = time.monotonic()

    started = time.monotonic()
    try:
        loop.train(cfg, report=report)
    finally:
        seconds = time.monotonic() - started
        done.set()

    run_dir = tmp_path / name
    metrics = read_metrics(run_dir)
    out = capsys.readouterr().out
    assert len(metrics) == STEPS, out
    restores = [m["faults/learner_restores"] for m in metrics]
    assert restores == [0.0] * KILLED_AFTER + [1.0] + [0.0] * (STEPS - KILLED_AFTER - 1), (restores, out)
    waits = [line for line in out.splitlines() if "lost with its node; waiting for a node" in line]
    assert len(waits) == 1 and "learner_node" in waits[0], out
    assert f"relay: fault: {name}/learner-0 update: actor died; restored from step_00000002 + 0 replayed" in out
    assert lost_and_duplicated(step_episodes(run_dir), PROMPTS, N) == (0, 0)
    with capsys.disabled():
        print(
            f"learner node loss: node marked dead {times['dead'] - times['killed']:.1f} s and back "
            f"{times['back'] - times['killed']:.1f} s after the kill; step "
            f"{KILLED_AFTER + 1} done {times['restored'] - times['killed']:.1f} s after it; run {seconds:.1f} s"
        )
