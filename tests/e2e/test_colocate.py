"""resources.colocate end to end (actors/colocated.py): one actor is learner and rollout worker.
It is the default layout on one node, so tests/e2e/test_training.py's runs of the default task
check it: the default run trains, one actor call a step (rollout and update back to back), with
every phase's time in the metrics; and --resume continues exactly (the rollouts leave the learner's
RNG stream alone). Here: which steps are one call, and a worker killed inside its rollout."""

from pathlib import Path

import pytest

from relay.config import load_config
from relay_trainer import loop
from relay_trainer.pools import Actors
from relay_trainer.steps import one_call_steps

REPO = Path(__file__).resolve().parents[2]
COLOCATE = ["resources.colocate=true", "logging.console=false", "checkpoint.save_hf_model=false"]
SMALL = ["training.prompts_per_step=4", "rollout.n=4", "task.num_eval_rows=4", "training.eval_before=false"]


@pytest.mark.parametrize(
    "overrides, role, one_call",
    [
        ([], None, True),
        (["algorithm.dynamic_sampling=true"], None, False),  # more rollouts may follow the first
        (["algorithm.overlong_buffer_len=2"], None, False),
        ([], "env", False),  # a lost environment pool's shard is redone by the driver before any update
        ([], "reference", False),
        ([], "critic", False),
        ([], "reward_model", False),
    ],
)
def test_one_call_steps_only_where_nothing_runs_between_rollout_and_update(overrides, role, one_call):
    cfg = load_config(None, ["resources.colocate=true", *overrides])
    actors = Actors(rollout=[object()], env=[], learner=object(), reference=None, colocated=True)
    if role is not None:
        setattr(actors, role, [object()] if role == "env" else object())
    assert one_call_steps(cfg, actors) is one_call
    actors.colocated = False
    assert not one_call_steps(cfg, actors)


@pytest.mark.slow  # the default tier restores a colocated worker killed in its step: tests/e2e/test_fault_matrix.py
def test_colocated_worker_killed_in_its_rollout_shard_is_restored_and_the_shard_redone(tmp_path, ray_session):
    """With an environment pool the step is separate calls; the colocated actor SIGKILLed inside
    step 2's rollout shard is restored as the learner and the shard redone, same prompts and seed."""
    from relay.fault_points import disarm
    from relay_trainer.fault_arming import arm_run

    def reported(name, fault):
        rewards, restores = [], []

        def report(step, m):
            rewards.append(m["reward/mean"])
            restores.append(m["faults/learner_restores"])
            if fault and step == 1:
                arm_run(name, "rollout.generate", "sigkill", tmp_path)

        cfg = load_config(
            REPO / "configs/default.yaml",
            [f"run.output_dir={tmp_path}", f"run.name={name}", *COLOCATE, *SMALL, "task.reward_actor=true"]
            + ["training.steps=3", "checkpoint.every=1"],
        )
        try:
            loop.train(cfg, report=report)
        finally:
            disarm()
        return rewards, restores

    undisturbed, _ = reported("calm", fault=False)
    rewards, restores = reported("killed", fault=True)
    assert rewards == undisturbed and restores == [0.0, 1.0, 0.0]
