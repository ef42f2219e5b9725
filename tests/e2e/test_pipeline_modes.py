"""training.mode one_step_off / async end to end on the tiny model: staleness bounded on every
trained sample, and resume (exact in one_step_off; every group trained exactly once in async)."""

import json
import os
import signal
from collections import Counter
from pathlib import Path

import pytest
import ray

from relay.config import load_config
from relay.run.stop import RunStopped
from relay_trainer import loop
from relay_trainer.producer import RolloutProducer

REPO = Path(__file__).resolve().parents[2]
SMALL = [
    "logging.console=false",
    "checkpoint.save_hf_model=false",
    "training.prompts_per_step=4",
    "rollout.n=4",
    "task.num_eval_rows=4",
    "training.eval_before=false",
    "checkpoint.every=2",
    "training.steps=4",
]


def run(tmp_path, overrides, resume=False, report=None):
    cfg = load_config(REPO / "configs/default.yaml", [f"run.output_dir={tmp_path}", *SMALL, *overrides])
    return loop.train(cfg, resume=resume, report=report)


def stop_after(step: int):
    """A report hook that sends this process SIGINT after `step`: the run checkpoints and stops."""

    def report(done, _):
        if done == step:
            os.kill(os.getpid(), signal.SIGINT)

    return report


@pytest.fixture
def trained(monkeypatch):
    """(step, samples) of every batch the pipeline handed to a training step."""
    batches = []
    take = RolloutProducer.take

    def spy(self):
        samples, metrics = take(self)
        batches.append((self.buffer.next_step - 1, samples))
        return samples, metrics

    monkeypatch.setattr(RolloutProducer, "take", spy)
    return batches


def test_async_resume_trains_every_group_once_within_max_staleness(tmp_path, ray_session, trained):
    mode = ["training.mode=async", "training.max_staleness=1", "training.groups_per_call=1", "run.name=a"]
    with pytest.raises(RunStopped):
        run(tmp_path, mode, report=stop_after(2))  # groups of step 3 are in flight when it stops
    saved = json.loads((tmp_path / "a" / "checkpoints" / "step_00000002" / "state.json").read_text())
    assert saved["pipeline"]["buffer"]["groups"], "the in-flight groups were finished and saved"
    run(tmp_path, mode, resume=True)
    assert [step for step, _ in trained] == [0, 1, 2, 3]
    for step, samples in trained:
        assert all(0 <= step - s.weight_version <= 1 for s in samples), step  # every trained sample
    counts = Counter(s.group_id for _, samples in trained for s in samples)
    assert counts == {g: 4 for g in range(16)}  # 4 steps x 4 prompts, each prompt's group (n=4) once


def test_async_step_takes_the_older_finished_call_first_after_an_evaluation(tmp_path, ray_session, trained):
    """Whole-step calls on one worker, a held-out evaluation after every step: while the driver
    evaluates, the next call finishes too, so a step finds two calls' groups back. It must train
    the older call's (one version stale) and drop none; reading whichever stream ray.wait answered
    first, it trained the newer call's and dropped the older one's as stale."""
    mode = ["training.mode=async", "training.max_staleness=1", "training.groups_per_call=4", "run.name=ev"]
    reported = []
    run(tmp_path, [*mode, "training.eval_every=1", "task.num_eval_rows=64"], report=lambda s, m: reported.append(m))
    assert [step for step, _ in trained] == [0, 1, 2, 3]
    for step, samples in trained:
        assert {step - s.weight_version for s in samples} == {min(step, 1)}, step
    assert sum(m["rollout/dropped_stale"] for m in reported) == 0
    counts = Counter(s.group_id for _, samples in trained for s in samples)
    assert counts == {g: 4 for g in range(16)}  # the prompts in the order they were drawn, each once


def signal_a_worker_after_step_1(tmp_path, monkeypatch, sig: int, overrides: list[str]) -> Counter:
    """An async run (2 workers, calls of 2 groups, one group live at a time: a stream may be half
    back) whose first rollout worker gets `sig` right after step 1 took its batch, with calls queued
    on it. Every prompt's group is still trained exactly once, within max_staleness; returns the
    run's summed faults/* counts."""
    batches, take, pids = [], RolloutProducer.take, []

    def take_then_signal(self):
        samples, metrics = take(self)
        step = self.buffer.next_step - 1
        batches.append((step, samples))
        if step == 0:  # asked now: the question queues behind the worker's calls, and the signal must not
            pids.append(ray.get(self.actors.rollout[0].__ray_call__.remote(lambda w: os.getpid())))
        if step == 1:
            assert any(call.worker == 0 for call in self.calls.values()), "calls in flight on the worker"
            os.kill(pids[0], sig)
        return samples, metrics

    monkeypatch.setattr(RolloutProducer, "take", take_then_signal)
    reported = []
    mode = ["training.mode=async", "training.max_staleness=1", "training.groups_per_call=2"]
    streams = ["rollout.max_live_episodes=4", "resources.rollout.count=2"]
    run(tmp_path, [*mode, *streams, *overrides], report=lambda step, m: reported.append(m))
    assert [step for step, _ in batches] == [0, 1, 2, 3]
    for step, samples in batches:
        assert all(0 <= step - s.weight_version <= 1 for s in samples), step
    counts = Counter(s.group_id for _, samples in batches for s in samples)
    assert counts == {g: 4 for g in range(16)}  # the lost calls' groups too, once each
    return sum((Counter({k: v for k, v in m.items() if k.startswith("faults/")}) for m in reported), Counter())


@pytest.mark.slow  # the default tier's async fault: tests/e2e/test_fault_matrix.py's env.step/sigkill/async cell
def test_async_rollout_worker_killed_mid_stream_has_its_groups_redone_once(tmp_path, ray_session, monkeypatch):
    """A rollout worker SIGKILLed with calls queued on it does not stop the run: Ray restarts it,
    the producer re-sends it the weights and sends the lost calls again; the loss is counted."""
    faults = signal_a_worker_after_step_1(tmp_path, monkeypatch, signal.SIGKILL, ["run.name=kill"])
    assert faults["faults/restarts"] == 1 and faults["faults/actor_errors"] >= 1, faults
    assert faults["faults/retried_shards"] >= 1 and faults["faults/duplicated_samples"] == 0, faults


@pytest.mark.slow
def test_async_rollout_worker_that_hangs_is_killed_at_its_deadline_and_its_groups_redone_once(
    tmp_path, ray_session, monkeypatch
):
    """A rollout worker stopped (SIGSTOP) with calls in flight: no group comes back from it for
    resources.rollout_timeout_s, so the producer kills it, Ray restarts it, and its calls' groups
    are redone there."""
    overrides = ["run.name=hang", "resources.rollout_timeout_s=30"]
    faults = signal_a_worker_after_step_1(tmp_path, monkeypatch, signal.SIGSTOP, overrides)
    assert faults["faults/timeouts"] == 1 and faults["faults/restarts"] == 1, faults
    assert faults["faults/retried_shards"] >= 1 and faults["faults/duplicated_samples"] == 0, faults


@pytest.mark.slow
def test_one_step_off_resume_is_exact_and_one_version_stale(tmp_path, ray_session, trained):
    mode = ["training.mode=one_step_off"]
    full = run(tmp_path, [*mode, "run.name=full"])
    with pytest.raises(RunStopped):
        run(tmp_path, [*mode, "run.name=part"], report=stop_after(2))
    resumed = run(tmp_path, [*mode, "run.name=part"], resume=True)
    assert all(step - s.weight_version == min(step, 1) for step, samples in trained for s in samples)

    def metrics(run_dir):
        return {m["step"]: m for m in map(json.loads, (Path(run_dir) / "metrics.jsonl").read_text().splitlines())}

    a, b = metrics(full["run_dir"]), metrics(resumed["run_dir"])
    for step in (3, 4):
        for key in ("actor/loss", "actor/grad_norm", "reward/mean", "response/length_mean", "weights/staleness"):
            assert a[step][key] == b[step][key], (step, key, a[step][key], b[step][key])
