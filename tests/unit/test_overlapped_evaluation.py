"""An in-run evaluation beside training (relay_trainer/evaluation.py) with stand-in calls: when it
is started, read once back, waited for (a new evaluation, a checkpoint), and the step it is logged
with; the supervised calls it rides on read without waiting (actors/supervision.PendingCalls, a
stand-in for Ray); and reward_hacking comparing a late result at the step whose weights it measured."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from ray.exceptions import GetTimeoutError

from actors import supervision
from actors.supervision import Call, Supervisor
from relay.config.health import HealthConfig
from relay.health import HealthMonitor
from relay.run import metric_keys as keys
from relay_trainer.evaluation import OverlappedEvaluation


class StandInCalls:
    """An evaluation's calls: back once the test says so; results() waited for (recorded) if not."""

    def __init__(self, step: int, waited: list):
        self.step, self.back, self.waited = step, False, waited

    def ready(self) -> bool:
        return self.back

    def results(self) -> list:
        if not self.back:
            self.waited.append(self.step)
        return [self.step]  # the weights the stand-in's samples carry


def evaluation(every: int):
    started, waited, lines = {}, [], []

    def start(step):
        started[step] = StandInCalls(step, waited)
        return started[step]

    def measure(results):
        return {"eval/accuracy": 0.5, keys.EVAL_WEIGHTS_VERSION: float(results[0])}

    return OverlappedEvaluation(every, start, measure, say=lines.append), started, waited, lines


def test_an_evaluation_is_logged_with_the_step_it_comes_back_at_and_never_held_over_a_checkpoint():
    evals, started, waited, lines = evaluation(every=2)
    assert evals.after_step(1, checkpoint=False) == {} and evals.measuring is None
    assert evals.after_step(2, checkpoint=False) == {} and evals.measuring == 2  # started; the loop goes on
    assert evals.after_step(3, checkpoint=False) == {}  # not back: nobody waits
    started[2].back = True
    out = evals.after_step(4, checkpoint=False)  # back: logged with step 4; the next one starts
    assert out == {"eval/accuracy": 0.5, keys.EVAL_WEIGHTS_VERSION: 2.0, keys.EVAL_LAG_STEPS: 2.0}
    assert evals.measuring == 4 and waited == []
    assert evals.after_step(5, checkpoint=False) == {}
    # step 6 checkpoints: the one out is waited for; step 6's own would share its record: skipped, said so
    out = evals.after_step(6, checkpoint=True)
    assert out[keys.EVAL_WEIGHTS_VERSION] == 4.0 and out[keys.EVAL_LAG_STEPS] == 2.0 and waited == [4]
    assert evals.measuring is None and 6 not in started
    assert lines == [
        "relay: held-out evaluation of step 6 skipped: the one of step 4 came back with this step, "
        "which checkpoints (one result per step's metrics)"
    ]


def test_a_new_evaluation_waits_for_the_one_out_and_a_checkpoint_step_evaluates_in_place():
    evals, started, waited, _ = evaluation(every=1)
    evals.after_step(1, checkpoint=False)
    out = evals.after_step(2, checkpoint=False)  # step 1's, still out: waited for before step 2's starts
    assert out[keys.EVAL_LAG_STEPS] == 1.0 and waited == [1] and evals.measuring == 2
    evals, started, waited, _ = evaluation(every=3)
    out = evals.after_step(3, checkpoint=True)  # nothing out: started and waited for, as in sync mode
    assert out[keys.EVAL_WEIGHTS_VERSION] == 3.0 and out[keys.EVAL_LAG_STEPS] == 0.0 and waited == [3]
    assert evals.measuring is None


def test_pending_calls_are_read_without_waiting_and_a_fresh_state_answer_is_redone(monkeypatch):
    class Ref:
        def __init__(self, value, done=True):
            self.value, self.done = value, done

    def wait(refs, num_returns=1, timeout=None, fetch_local=True):
        return [r for r in refs if r.done], [r for r in refs if not r.done]

    def get(ref, timeout=None):
        if not ref.done:
            raise GetTimeoutError()
        return ref.value

    monkeypatch.setattr(supervision, "ray", SimpleNamespace(wait=wait, get=get))
    first = [Ref("fresh"), Ref("ok-0", done=False)]  # a replacement's answer, then the redone call's
    second = [Ref("ok-1", done=False)]
    calls = [
        Call("w0", lambda: first.pop(0), "rollout-0 rollout shard", shard=True, valid=lambda r: r != "fresh"),
        Call("w1", lambda: second.pop(0), "rollout-1 rollout shard", shard=True, valid=lambda r: r != "fresh"),
    ]
    faults = Supervisor(1.0, log=lambda line: None)
    pending = faults.start_all(calls, 3600.0)
    refs = list(pending.refs)
    assert not pending.ready()  # call 0 answered from a fresh state: redone at once; nothing waited for
    assert faults.counts["restarts"] == 1 and faults.counts["retried_shards"] == 1
    redone = pending.refs[0]
    assert redone is not refs[0] and not pending.ready()
    redone.done = refs[1].done = True
    assert pending.ready() and pending.results() == ["ok-0", "ok-1"]


def test_a_late_held_out_result_is_compared_at_the_step_whose_weights_it_measured():
    """window 2; held out 0.5 before training (reward level then: step 1's 0.2). Step 2's evaluation
    starts at reward level 0.2 and comes back at step 4, when the level is 0.8. Compared at step 2:
    the reward had not risen (no alarm). Compared at step 4 it would have risen 0.6 with held out
    flat: reward_hacking."""
    cfg = HealthConfig(window=2)
    late = {"eval/accuracy": 0.5, keys.EVAL_LAG_STEPS: 2.0}

    def feed(evaluating: bool):
        lines = []
        monitor = HealthMonitor(cfg, {"eval/accuracy": 0.5}, say=lines.append)
        for step, reward in enumerate((0.2, 0.2, 0.8), start=1):
            monitor.observe(step, {keys.REWARD_MEAN: reward}, evaluating=evaluating and step == 2)
        out = monitor.observe(4, {keys.REWARD_MEAN: 0.8, **late})
        return out, lines, monitor

    out, lines, monitor = feed(evaluating=True)
    assert out[keys.health_value("reward_hacking")] == pytest.approx(0.0) and lines == []
    assert monitor.heldout == {"step": 2, "value": 0.5, "reward": pytest.approx(0.2)} and monitor.levels == {}
    # the next result (lag 0, at step 5) is compared with step 2's point: reward 0.2 -> 0.8, held out flat
    out = monitor.observe(5, {keys.REWARD_MEAN: 0.8, "eval/accuracy": 0.5, keys.EVAL_LAG_STEPS: 0.0})
    assert keys.health_fired("reward_hacking") in out and "since step 2" in monitor.alarms[-1]["line"]
    out, lines, _ = feed(evaluating=False)  # no level kept: compared at step 4's, the rule fires
    assert out[keys.health_value("reward_hacking")] == pytest.approx(0.6) and "reward_hacking" in lines[0]
