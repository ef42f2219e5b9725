"""A learner that dies while it makes the weights payload: the rollout workers' loads fail on the
payload, and the run's error names the learner, not a worker "failed on 4 replacements"."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import ray
from ray.exceptions import RayActorError

from actors.supervision import Supervisor
from relay.failures import actor_error_line
from relay_trainer.weights import sync_weights


def dying_learner():
    """Made in a function: Ray pickles it by value (the workers cannot import this test module)."""

    class DyingLearner:
        def get_weights(self):
            os._exit(1)  # the process ends while the payload is being made

    return DyingLearner


def loading_worker():
    class LoadingWorker:
        def update_weights(self, weights, version: int) -> int:
            return version

    return LoadingWorker


def test_a_learner_dead_while_making_the_weights_is_the_error_not_the_workers(shared_ray):
    learner = ray.remote(dying_learner()).options(num_cpus=0.1, name="weights-source/learner-0").remote()
    workers = [ray.remote(loading_worker()).options(num_cpus=0.1, max_restarts=1).remote() for _ in range(2)]
    lines: list[str] = []
    actors = SimpleNamespace(
        learner=learner,
        rollout=workers,
        faults=Supervisor(20.0, 20.0, log=lines.append),
        colocated=False,
        weight_broadcast=None,
        shared_weights=None,  # no shared memory: the payload goes through the object store
    )
    with pytest.raises(RayActorError) as error:
        sync_weights(actors, version=1)
    assert actor_error_line(error.value).startswith("weights-source/learner-0 (")
    assert all(ray.get(w.update_weights.remote(None, 2)) == 2 for w in workers)  # the workers are fine
