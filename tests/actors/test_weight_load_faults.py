"""The weight sync's faults on local Ray (configs/default.yaml, three rollout workers reading the
learner's shared-memory buffers): a worker that hangs or dies in its load, or was lost just before
it, is restarted and loads the weights through the object store, and the sync goes on; a learner
that dies writing the buffers is the error, named as the learner.

Each fault is placed exactly: a function sent to the actor (`__ray_call__`) replaces the one call
the load or the write makes on the shared-memory buffers by one that stops or kills the process.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import ray
from ray.exceptions import RayActorError

from relay.config import load_config
from relay.failures import actor_error_line
from relay.run.model_source import resolve_model_path
from relay_trainer.pools import actor_pools
from relay_trainer.weights import sync_weights

REPO = Path(__file__).resolve().parents[2]
CALL_TIMEOUT_S, ROLLOUT_TIMEOUT_S = 10.0, 120.0
RUN = "test-weight-load"


@pytest.fixture(scope="module")
def actors(shared_ray):
    cfg = load_config(
        REPO / "configs/default.yaml",
        [
            "resources.rollout.count=3",
            "training.prompts_per_step=12",
            "resources.rollout.cpus=0.5",
            "resources.learner.cpus=0.5",
            "resources.env.cpus=0.1",
            "resources.max_restarts=10",
            "resources.learner_restores=0",  # a lost learner stops here (no loop around these calls restores it)
            f"resources.call_timeout_s={CALL_TIMEOUT_S}",
            f"resources.rollout_timeout_s={ROLLOUT_TIMEOUT_S}",
        ],
    )
    path = resolve_model_path(cfg.model, cfg.task, cfg.tools, cfg.critic, cfg.reward_model)
    with actor_pools(cfg, path, RUN) as actors:
        if actors.shared_weights != [True, True, True]:
            pytest.skip("/dev/shm has no room for the learner's shared-memory buffers here")
        sync_weights(actors, version=1)
        actors.faults.take()
        yield actors


def stop_in_shared_read():
    """Made in a function: Ray pickles it by value (an actor cannot import this test module)."""

    def patch(self):
        def read(version):
            os.kill(os.getpid(), signal.SIGSTOP)  # the process hangs inside its shared-memory load

        self.shared_weights.read = read

    return patch


def kill_in_shared_write():
    def patch(self):
        def write(weights, version):
            os.kill(os.getpid(), signal.SIGKILL)  # the learner dies while it writes the buffers

        self.shared_weights.write = write

    return patch


def weight_tools():
    """(nudge, sums): new learner weights, so a worker still on the model it was built from is told
    apart; and a model's weights as one sum per tensor. Made in a function, as above."""

    def nudge(self):
        for p in self.model.parameters():
            p.data.add_(1e-3)

    def sums(self):
        model = getattr(self, "engine", self).model  # a rollout worker's engine's, or the learner's
        return [float(t.double().sum()) for t in model.state_dict().values()]

    return nudge, sums


def synced(actors, version: int) -> dict[str, float]:
    """Sync `version` (new learner weights), check every worker holds exactly the learner's, return the counts."""
    nudge, sums = weight_tools()
    ray.get(actors.learner.__ray_call__.remote(nudge))
    sync_weights(actors, version)
    learner = ray.get(actors.learner.__ray_call__.remote(sums))
    for w in actors.rollout:
        assert ray.get(w.weight_version.remote()) == version
        assert ray.get(w.__ray_call__.remote(sums)) == learner
    return actors.faults.take()


@pytest.mark.slow  # the default tier's fault matrix sample hangs a worker in the same load, in a run
def test_a_worker_hung_in_its_shared_memory_load_is_restarted_and_loads_the_weights(actors):
    ray.get(actors.rollout[0].__ray_call__.remote(stop_in_shared_read()))
    counts = synced(actors, version=2)
    assert counts["faults/timeouts"] == 1 and counts["faults/restarts"] == 1
    assert counts["faults/retried_calls"] == 1
    assert counts["faults/actor_errors"] == 0
    # from now on the replacement gets each version through the object store
    assert not any(synced(actors, version=3).values())


def test_a_worker_lost_before_its_load_gets_the_weights_through_the_object_store(actors):
    pid = ray.get(actors.rollout[1].__ray_call__.remote(lambda self: os.getpid()))
    os.kill(pid, signal.SIGKILL)  # between calls: its replacement answers the load with None
    counts = synced(actors, version=4)
    assert counts["faults/restarts"] == 1 and counts["faults/retried_calls"] == 1
    assert counts["faults/timeouts"] == 0


def test_a_learner_dead_in_its_shared_memory_write_is_named_as_the_learner(actors):
    """Last in this module: it kills the learner. rollout-2 still reads the shared memory, so the learner writes it."""
    ray.get(actors.learner.__ray_call__.remote(kill_in_shared_write()))
    with pytest.raises(RayActorError) as error:
        sync_weights(actors, version=5)
    line = actor_error_line(error.value)
    assert line.startswith(f"{RUN}/learner-0 (Learner): "), line
    assert "RolloutWorker" not in line
