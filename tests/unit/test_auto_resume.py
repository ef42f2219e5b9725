"""resources.auto_resume: a run whose learner died resumes from its last checkpoint, in the driver."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from relay.failures import ActorLost, RunFailed
from relay.run.auto_resume import lost_line, train_with_auto_resume


def config(auto_resume: int, name: str = "run"):
    return SimpleNamespace(resources=SimpleNamespace(auto_resume=auto_resume), name=name)


def checkpoint(run_dir, step: int) -> None:
    folder = run_dir / "checkpoints" / f"step_{step:06d}"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text("{}")


def test_the_line_names_the_last_checkpoint_and_the_resume_command(tmp_path):
    run_dir = tmp_path / "tiny-grpo-1"
    checkpoint(run_dir, 2)
    checkpoint(run_dir, 4)
    line = lost_line(ActorLost("learner-0 died", run_dir), ["training.steps=9", "run.name=tiny-grpo"])
    assert "learner-0 died" in line
    assert f"last complete checkpoint {run_dir / 'checkpoints' / 'step_000004'}" in line
    assert line.endswith("resume: python driver.py --resume training.steps=9 run.name=tiny-grpo-1")
    assert "no checkpoint yet" in lost_line(ActorLost("x", tmp_path / "empty"), [])


def test_resumes_up_to_n_times_then_stops_with_the_line(tmp_path):
    calls, logged = [], []

    def train(cfg, resume):
        calls.append((cfg.name, resume))
        if len(calls) <= 2:
            raise ActorLost("learner-0 died", tmp_path / "run-1")
        return {"done": True}

    def named(name):
        return config(2, name)

    assert train_with_auto_resume(train, config(2), False, [], named, log=logged.append) == {"done": True}
    assert calls == [("run", False), ("run-1", True), ("run-1", True)]
    assert sum("auto_resume" in line for line in logged) == 2

    calls.clear()
    with pytest.raises(RunFailed, match="resume: python driver.py --resume run.name=run-1") as raised:
        train_with_auto_resume(train, config(0), False, [], named, log=logged.append)
    assert len(calls) == 1 and not isinstance(raised.value, ActorLost)


def test_new_keys_are_validated():
    from relay.config import ConfigError, load_config

    with pytest.raises(ConfigError) as e:
        load_config(
            None,
            [
                "resources.max_restarts=-2",
                "resources.call_timeout_s=0",
                "resources.rollout_timeout_s=-1",
                "resources.update_timeout_s=0",
                "resources.auto_resume=-1",
            ],
        )
    text = "\n".join(e.value.problems)
    for key in ("max_restarts", "call_timeout_s", "rollout_timeout_s", "update_timeout_s", "auto_resume"):
        assert f"resources.{key}" in text
