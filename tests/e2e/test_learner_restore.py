"""A learner killed inside its update (SIGKILL of its own process) is restarted by Ray and restored
in place (relay_trainer/learner_recovery.py): the run completes every step, each step's reward equals an
undisturbed run's with the same seed, and the final weights and optimizer state match its own.

One run of 4 steps with checkpoint.every=2 is killed twice: in step 2's update, before any
checkpoint (restored from the run's start, step 1's update replayed), and in step 4's update
(restored from the step-2 checkpoint, step 3's update replayed). Each kill is a function sent to
the learner (`__ray_call__`) once the step before is logged: its next loss computation kills it.
Two runs of the default task: the default tier's budget (a third run would add about as much).
"""

from __future__ import annotations

import json
import os
import signal

import pytest
import ray
from safetensors.torch import load_file

import driver
from relay.checkpoint.atomic import latest_checkpoint
from relay_trainer import loop

pytestmark = pytest.mark.usefixtures("ray_session")
STEPS = 4
EVERY = 2
KILLED_AFTER = (1, 3)  # steps logged; the next step's update kills the learner
KEYS = ("faults/learner_restores", "faults/restarts", "faults/actor_errors")


def argv(tmp_path, name: str, every: int, extra: tuple[str, ...] = ()) -> list[str]:
    return [
        *extra,
        f"run.output_dir={tmp_path}",
        f"run.name={name}",
        f"training.steps={STEPS}",
        "training.prompts_per_step=4",
        "rollout.n=4",
        "task.num_eval_rows=4",
        "training.eval_before=false",
        f"checkpoint.every={every}",
        "checkpoint.save_hf_model=false",
        "logging.console=false",
        "resources.colocate=false",  # the learner actor alone (a colocated one: tests/e2e/test_fault_matrix.py)
    ]


def kill_in_loss(sig: int = signal.SIGKILL):
    """Made in a function: Ray pickles it by value (an actor cannot import this test module)."""

    def patch(self):
        def loss(micro):
            os.kill(os.getpid(), sig)

        self._actor._loss = loss  # the Learner behind its stand-in (relay_trainer/actor_class.py)

    return patch


def run(
    monkeypatch, tmp_path, name: str, every: int, kill: bool, extra: tuple[str, ...] = ()
) -> tuple[list[dict], dict]:
    """driver.main; each step's metrics and the final checkpoint's tensors."""
    reported, original = [], loop.train

    def after(step, metrics):
        reported.append(metrics)
        if kill and step in KILLED_AFTER:
            ray.get(ray.get_actor(f"{name}/learner-0", namespace="relay").__ray_call__.remote(kill_in_loss()))

    monkeypatch.setattr(loop, "train", lambda cfg, resume: original(cfg, resume, report=after))
    assert driver.main(argv(tmp_path, name, every, extra)) == 0
    final = latest_checkpoint(tmp_path / name / "checkpoints")
    tensors = {g: load_file(str(final / f"{g}.safetensors")) for g in ("policy", "optimizer")}
    return reported, tensors


@pytest.fixture(scope="module")
def undisturbed(tmp_path_factory):
    with pytest.MonkeyPatch.context() as monkeypatch:
        return run(monkeypatch, tmp_path_factory.mktemp("undisturbed"), "undisturbed", EVERY, kill=False)


BROADCAST = ("resources.weight_sync=broadcast",)


# The broadcast weight group: the replacement learner is not in it, so it forms again before the
# next broadcast (the weights are the same numbers as through shared memory).
@pytest.mark.parametrize("extra", [(), pytest.param(BROADCAST, id="broadcast", marks=pytest.mark.slow)])
def test_a_learner_killed_in_its_update_is_restored_and_the_run_loses_no_step(
    undisturbed, tmp_path, monkeypatch, capsys, extra
):
    name = "restore"
    reported, tensors = run(monkeypatch, tmp_path, name, EVERY, kill=True, extra=extra)
    expected, expected_tensors = undisturbed
    assert len(reported) == STEPS
    assert [m["reward/mean"] for m in reported] == [m["reward/mean"] for m in expected]
    assert {k: sum(m[k] for m in reported) for k in KEYS} == dict.fromkeys(KEYS, 2.0)
    assert [m["faults/learner_restores"] for m in reported] == [0.0, 1.0, 0.0, 1.0]
    assert [m["weights/version"] for m in reported] == list(range(1, STEPS + 1))
    logged = [json.loads(line)["step"] for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
    assert logged == list(range(1, STEPS + 1))  # no step redone
    out = capsys.readouterr().out
    for base in ("the run's start + 1", "step_00000002 + 1"):
        assert f"relay: fault: {name}/learner-0 update: actor died; restored from {base} replayed updates in " in out
    assert "the run stopped" not in out
    for group, expected_group in expected_tensors.items():  # bit for bit on CPU; a float's noise allowed
        worst = max((tensors[group][k].double() - v.double()).abs().max().item() for k, v in expected_group.items())
        assert worst <= 1e-6, (group, worst)
