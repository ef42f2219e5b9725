"""Learner recovery is one layer: every driver phase that calls the learner is marked
`restores_learner` and runs through the run's recovery, which restores a lost learner and runs the
phase again. A restored learner's update reads its own old logprobs again, never the lost one's."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

from relay.config import load_config
from relay.config.resolved import BEFORE_UPDATE
from relay.config.role_settings import StepSettings
from relay.envs.arithmetic import make_rows
from relay.envs.data import PromptIterator
from relay.failures import ActorLost
from relay.run.step_metrics import PhaseTimer
from relay_trainer.learner_recovery import restores_learner
from relay_trainer.steps import ActorCalls, OneCall


class RestoresOnce:
    """A recovery whose learner is lost in the first try of each phase, and restored."""

    def __init__(self):
        self.restores, self.phases, self.kept = 0, [], []

    def run(self, phase, what):
        self.phases.append(what)
        try:
            return phase()
        except ActorLost:
            self.restores += 1
            return phase()

    def keep(self, *args, **kwargs):
        self.kept.append(kwargs)


class Learner:
    """Its first update is lost; every call is recorded."""

    def __init__(self):
        self.updates, self.logprob_calls = [], 0
        self.update = SimpleNamespace(remote=self._update)
        self.compute_logprobs = SimpleNamespace(remote=self._logprobs)
        self.rollout_and_update = SimpleNamespace(remote=lambda *args: ("step", args))

    def _update(self, **kwargs):
        self.updates.append(dict(kwargs))
        return "lost" if len(self.updates) == 1 else {"loss": 1.0}

    def _logprobs(self, step):
        self.logprob_calls += 1
        return f"old logprobs #{self.logprob_calls}"


def supervisor():
    def get(result, handle, what, long=False):
        if result == "lost":
            raise ActorLost(f"{what}: no answer")
        return result

    return SimpleNamespace(get=get, wait=lambda *a, **k: None, add=lambda counts: None)


def actor_calls(recovery, learner) -> ActorCalls:
    settings = dataclasses.replace(StepSettings.of(load_config(None, [])), old_logprobs=BEFORE_UPDATE)
    actors = SimpleNamespace(learner=learner, critic=None, reference=None, faults=supervisor(), recovery=recovery)
    return ActorCalls(settings, actors, PromptIterator(make_rows(8, 0, 2), 0), SimpleNamespace(value=0.1), None)


def test_a_marked_phase_runs_through_the_recovery_of_the_actors_it_is_given_or_its_plan_holds():
    recovery = RestoresOnce()
    actors = SimpleNamespace(recovery=recovery)
    tries = []

    @restores_learner("evaluation")
    def evaluate(actors, rows):
        tries.append(rows)
        if len(tries) == 1:
            raise ActorLost("evaluation: the learner was lost")
        return {"eval/accuracy": 1.0}

    assert evaluate(actors, [1, 2]) == {"eval/accuracy": 1.0}
    assert tries == [[1, 2], [1, 2]] and recovery.phases == ["evaluation"] and recovery.restores == 1

    plan = SimpleNamespace(actors=actors)
    assert restores_learner("checkpoint")(lambda plan: "saved")(plan) == "saved"
    assert recovery.phases == ["evaluation", "checkpoint"]


def test_an_update_made_again_on_a_restored_learner_reads_fresh_old_logprobs_and_is_kept_once():
    recovery, learner = RestoresOnce(), Learner()
    plan = actor_calls(recovery, learner)
    inputs = plan.advantage_inputs([], PhaseTimer())
    assert inputs["old_logprobs"] == "old logprobs #1"
    assert plan.update(inputs, PhaseTimer()) == {"loss": 1.0}
    assert recovery.phases == ["logprobs", "update"]
    assert [u["old_logprobs"] for u in learner.updates] == ["old logprobs #1", "old logprobs #2"]
    assert [k["old_logprobs"] for k in recovery.kept] == ["old logprobs #2"]  # what a later replay trains on


def test_an_update_that_is_not_lost_is_sent_once_with_the_inputs_it_was_given():
    recovery, learner = RestoresOnce(), Learner()
    learner.updates.append({})  # its next update answers
    plan = actor_calls(recovery, learner)
    plan.update(plan.advantage_inputs([], PhaseTimer()), PhaseTimer())
    assert [u.get("old_logprobs") for u in learner.updates[1:]] == ["old logprobs #1"] and learner.logprob_calls == 1


def test_the_colocated_step_call_is_marked_and_the_weight_sync_and_checkpoint_of_a_producer_plan_too():
    recovery, learner = RestoresOnce(), Learner()
    plan = actor_calls(recovery, learner)
    plan.producer = SimpleNamespace(sync_weights=lambda version: None, state_dict=lambda: {"groups": []})
    plan.sync_weights(3)
    assert plan.state_dict() == {"groups": []}
    one = OneCall(plan.settings, plan.actors, plan.prompts, plan.kl_ctl)
    assert one._one_call(["row"], 7, 0.1) == ("step", (["row"], 7, 0.1))
    assert recovery.phases == ["weight sync", "checkpoint", "step"]
