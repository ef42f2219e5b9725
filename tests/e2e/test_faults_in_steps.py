"""Faults placed at an exact moment of a step of the default run (sync): a rollout worker that hangs
inside its shared-memory weight load costs no step; a learner killed inside its update, where it is
not restored (resources.learner_restores=0, as a rank group's), stops the run with a line that
names the learner (tests/e2e/test_learner_restore.py: restored in place).

Each fault is a function sent to the actor (`__ray_call__`) after step 1 is logged; it replaces one
call the actor makes in that phase by one that stops or kills its own process.
"""

from __future__ import annotations

import json
import os
import signal

import pytest
import ray

import driver
from relay_trainer import loop

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ray_session")]
STEPS = 3
CALL_TIMEOUT_S = 10.0  # far above a healthy tiny-model weight load on a loaded 2-core machine


def argv(tmp_path, name: str) -> list[str]:
    return [
        f"run.output_dir={tmp_path}",
        f"run.name={name}",
        f"training.steps={STEPS}",
        "training.prompts_per_step=4",
        "rollout.n=4",
        "task.num_eval_rows=4",
        "training.eval_before=false",
        "checkpoint.every=0",
        "checkpoint.save_hf_model=false",
        "logging.console=false",
        "resources.rollout.count=2",
        f"resources.call_timeout_s={CALL_TIMEOUT_S}",
    ]


def stop_in_shared_read():
    """Made in a function: Ray pickles it by value (an actor cannot import this test module)."""

    def patch(self):
        def read(version):
            os.kill(os.getpid(), signal.SIGSTOP)

        self.shared_weights.read = read

    return patch


def kill_in_loss():
    def patch(self):
        def loss(micro):
            os.kill(os.getpid(), signal.SIGKILL)

        self._actor._loss = loss  # the Learner behind its stand-in (relay_trainer/actor_class.py)

    return patch


def run_with(monkeypatch, name: str, role: str, patch) -> list[dict]:
    """driver.main with `patch` sent to `<name>/<role>` once step 1 is logged; each step's metrics."""
    reported, original = [], loop.train

    def after(step, metrics):
        reported.append(metrics)
        if step == 1:
            ray.get(ray.get_actor(f"{name}/{role}", namespace="relay").__ray_call__.remote(patch))

    monkeypatch.setattr(loop, "train", lambda cfg, resume: original(cfg, resume, report=after))
    return reported


def test_a_worker_hung_in_its_shared_memory_load_costs_no_step(tmp_path, monkeypatch):
    reported = run_with(monkeypatch, "load-hang", "rollout-1", stop_in_shared_read())
    assert driver.main(argv(tmp_path, "load-hang")) == 0
    assert len(reported) == STEPS
    faults = {k: sum(m[k] for m in reported) for k in ("faults/timeouts", "faults/restarts", "faults/retried_calls")}
    assert faults == {"faults/timeouts": 1, "faults/restarts": 1, "faults/retried_calls": 1}
    logged = [json.loads(line)["step"] for line in (tmp_path / "load-hang" / "metrics.jsonl").read_text().splitlines()]
    assert logged == [1, 2, 3]


def test_a_learner_killed_in_its_update_is_named_as_the_learner(tmp_path, monkeypatch, capsys):
    reported = run_with(monkeypatch, "update-kill", "learner-0", kill_in_loss())
    assert driver.main([*argv(tmp_path, "update-kill"), "resources.learner_restores=0"]) != 0
    assert len(reported) == 1
    out = capsys.readouterr()
    stop = [line for line in (out.out + out.err).splitlines() if "the run stopped" in line]
    assert len(stop) == 1 and "an actor died: update-kill/learner-0 (Learner): " in stop[0], stop
    assert "RolloutWorker" not in stop[0] and "rollout-" not in stop[0]
