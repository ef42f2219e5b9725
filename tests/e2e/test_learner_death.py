"""A learner killed mid-run, or hung past its deadline, where it is not restored in place
(resources.learner_restores=0, as for a rank group): the run names its last complete checkpoint and
the --resume command, and with resources.auto_resume=1 goes on from that checkpoint in the same
driver to the end. A learner hung past its deadline and restored in place is the last test."""

from __future__ import annotations

import json
import os
import re
import signal

import pytest
import ray

import driver
from relay.checkpoint.atomic import latest_checkpoint
from relay_trainer import loop

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ray_session")]
STEPS = 4
UPDATE_TIMEOUT_S = 20.0  # far above a healthy tiny-model update or checkpoint on a loaded 2-core machine


def test_a_killed_learner_stops_the_run_which_auto_resume_continues(tmp_path, monkeypatch, capsys):
    kills, original = [], loop.train

    def kill_the_learner_once(step, metrics):
        if step == 2 and not kills:  # step 2 is logged; its checkpoint then meets the dead learner
            kills.append(step)
            ray.kill(ray.get_actor("learner-death/learner-0", namespace="relay"))

    monkeypatch.setattr(loop, "train", lambda cfg, resume: original(cfg, resume, report=kill_the_learner_once))
    argv = [
        f"run.output_dir={tmp_path}",
        "run.name=learner-death",
        f"training.steps={STEPS}",
        "training.prompts_per_step=4",
        "rollout.n=4",
        "task.num_eval_rows=4",
        "checkpoint.every=1",
        "checkpoint.save_hf_model=false",
        "logging.console=false",
        "resources.auto_resume=1",
        "resources.learner_restores=0",
    ]
    assert driver.main(argv) == 0
    out = capsys.readouterr().out
    run_dir = tmp_path / "learner-death"
    assert kills == [2]
    assert "an actor died: learner-death/learner-0 (Learner)" in out
    # step 1's checkpoint: step 2's save met the dead learner
    assert re.search(f"last complete checkpoint {re.escape(str(run_dir / 'checkpoints'))}/step_0+1;", out)
    resume = " ".join(a for a in argv if not a.startswith("run.name="))
    assert f"resume: python driver.py --resume {resume} run.name=learner-death" in out
    assert "auto_resume 1/1: resuming learner-death in this driver" in out
    assert re.fullmatch(f"step_0*{STEPS}", latest_checkpoint(run_dir / "checkpoints").name)
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 2, 3, 4]  # step 2 ran again from checkpoint 1: logged twice, trained once


def hang_the_learner_after_step_3(monkeypatch, run_name: str) -> list:
    """loop.train with a report hook that stops (SIGSTOP) the learner's process once step 3 is
    logged, so step 4's update hangs; the returned list gets its pid."""
    stopped, original = [], loop.train

    def hang_the_learner_once(step, metrics):
        if step == 3 and not stopped:
            learner = ray.get_actor(f"{run_name}/learner-0", namespace="relay")
            stopped.append(ray.get(learner.__ray_call__.remote(lambda self: os.getpid())))
            os.kill(stopped[0], signal.SIGSTOP)

    monkeypatch.setattr(loop, "train", lambda cfg, resume: original(cfg, resume, report=hang_the_learner_once))
    return stopped


def hang_argv(tmp_path, run_name: str) -> list[str]:
    return [
        f"run.output_dir={tmp_path}",
        f"run.name={run_name}",
        f"training.steps={STEPS}",
        "training.prompts_per_step=4",
        "rollout.n=4",
        "task.num_eval_rows=4",
        "checkpoint.every=2",
        "checkpoint.save_hf_model=false",
        "logging.console=false",
        f"resources.update_timeout_s={UPDATE_TIMEOUT_S}",
    ]


def test_a_learner_hung_in_its_update_is_killed_at_the_deadline_and_auto_resume_continues(
    tmp_path, monkeypatch, capsys
):
    """The learner's process stopped (SIGSTOP) after step 3 is logged: step 4's update hangs, its
    deadline (resources.update_timeout_s) kills the learner, and the run resumes from checkpoint 2."""
    stopped = hang_the_learner_after_step_3(monkeypatch, "learner-hang")
    argv = [*hang_argv(tmp_path, "learner-hang"), "resources.auto_resume=1", "resources.learner_restores=0"]
    assert driver.main(argv) == 0
    out = capsys.readouterr().out
    run_dir = tmp_path / "learner-hang"
    assert len(stopped) == 1
    hung = f"learner-hang/learner-0 update: no answer within {UPDATE_TIMEOUT_S:g}s (resources.update_timeout_s)"
    assert f"relay: fault: {hung}; killing it, the run stops" in out
    assert f"an actor died: {hung}; killed; last complete checkpoint {run_dir / 'checkpoints'}" in out
    assert "auto_resume 1/1: resuming learner-hang in this driver" in out
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [1, 2, 3, 3, 4]  # steps 3 and 4 redone from checkpoint 2
    assert re.fullmatch(f"step_0*{STEPS}", latest_checkpoint(run_dir / "checkpoints").name)


def test_a_learner_hung_in_its_update_is_killed_at_the_deadline_and_restored_in_place(tmp_path, monkeypatch, capsys):
    """As above with the default resources.learner_restores: the killed learner is restarted, given
    checkpoint 2's state and step 3's update replayed, and step 4 goes on; no step is redone."""
    hang_the_learner_after_step_3(monkeypatch, "learner-hang-restore")
    assert driver.main(hang_argv(tmp_path, "learner-hang-restore")) == 0
    out = capsys.readouterr().out
    run_dir = tmp_path / "learner-hang-restore"
    hung = f"learner-hang-restore/learner-0 update: no answer within {UPDATE_TIMEOUT_S:g}s (resources.update_timeout_s)"
    assert f"relay: fault: {hung}; killing it, to restore it" in out
    assert (
        "learner-hang-restore/learner-0 update: no answer within its deadline; restored from step_00000002 + 1" in out
    )
    assert "the run stopped" not in out
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [1, 2, 3, 4]
    assert [m["faults/learner_restores"] for m in lines] == [0, 0, 0, 1]
