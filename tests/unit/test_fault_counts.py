"""actors/supervision.py without a cluster: counts, the error's one line, ActorLost on the way out."""

from __future__ import annotations

import pickle

import pytest
from ray.exceptions import ActorDiedError, OutOfMemoryError

from actors.supervision import FAULT_COUNTS, ShardLost, Supervisor
from relay.failures import ActorLost, actor_error_line
from relay_trainer.actor_loss import actor_loss_stops


def test_counts_are_taken_per_step_and_kept_in_totals():
    faults = Supervisor(1.0, log=lambda line: None)
    faults.count("timeouts")
    faults.add({"faults/retried_calls": 2.0, "faults/restarts": 1.0})  # a rollout worker's, by metric name
    assert faults.take() == {
        **{f"faults/{name}": 0.0 for name in FAULT_COUNTS},
        "faults/timeouts": 1.0,
        "faults/retried_calls": 2.0,
        "faults/restarts": 1.0,
    }
    assert not any(faults.take().values())
    assert faults.totals["retried_calls"] == 2


def test_shard_lost_keeps_its_counts_through_pickling():
    lost = pickle.loads(pickle.dumps(ShardLost("env-0 hung", {"faults/timeouts": 1.0})))
    assert str(lost) == "env-0 hung" and lost.counts == {"faults/timeouts": 1.0}


def test_a_dead_actor_leaves_the_run_as_actor_lost_naming_the_run_folder(tmp_path):
    error = ActorDiedError()
    with pytest.raises(ActorLost) as raised, actor_loss_stops(tmp_path):
        raise error
    assert raised.value.run_dir == tmp_path and raised.value.__cause__ is error
    with pytest.raises(ActorLost) as raised, actor_loss_stops(tmp_path):
        raise ActorLost("rollout-0 rollout shard failed on 4 replacements in a row")
    assert raised.value.run_dir == tmp_path and "4 replacements" in str(raised.value)
    memory = OutOfMemoryError("2 worker(s) were killed due to the node running low on memory.\nRefer to ...")
    with (
        pytest.raises(ActorLost, match="^killed for memory: 2 worker.s. were killed .*memory.$"),
        actor_loss_stops(tmp_path),
    ):
        raise memory  # one line and the resume command (or resources.auto_resume), not Ray's traceback


def test_the_error_line_names_the_actor():
    class Died(ActorDiedError):
        def __str__(self):
            return "The actor died unexpectedly.\n\tclass_name: Learner actor_id: 1f pid: 7 name: run/learner-0 namespace: relay"

    assert actor_error_line(Died()) == "run/learner-0 (Learner): The actor died unexpectedly."
