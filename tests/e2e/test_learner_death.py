"""A learner killed mid-run: the run names its last complete checkpoint and the --resume command,
and with resources.auto_resume=1 goes on from that checkpoint in the same driver to the end."""

from __future__ import annotations

import json
import re

import pytest
import ray

import driver
from relay.checkpoint import latest_checkpoint

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ray_session")]
STEPS = 4


def test_a_killed_learner_stops_the_run_which_auto_resume_continues(tmp_path, monkeypatch, capsys):
    kills, original = [], driver.train

    def kill_the_learner_once(step, metrics):
        if step == 2 and not kills:  # step 2 is logged; its checkpoint then meets the dead learner
            kills.append(step)
            ray.kill(ray.get_actor("learner-death/learner-0", namespace="relay"))

    monkeypatch.setattr(driver, "train", lambda cfg, resume: original(cfg, resume, report=kill_the_learner_once))
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
