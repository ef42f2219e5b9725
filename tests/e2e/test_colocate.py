"""resources.colocate end to end (actors/colocated.py): one actor is learner and rollout worker.
The default task trains, one actor call a step (rollout and update back to back), every phase's
time is still in the metrics, and --resume continues exactly (the rollouts leave the learner's RNG
stream alone)."""

import json
import shutil
from pathlib import Path

import pytest

import driver
from relay.config import load_config
from relay.run import metric_keys as keys
from relay_trainer.pools import Actors
from relay_trainer.steps import one_call_steps

REPO = Path(__file__).resolve().parents[2]
COLOCATE = ["resources.colocate=true", "logging.console=false", "checkpoint.save_hf_model=false"]
SMALL = ["training.prompts_per_step=4", "rollout.n=4", "task.num_eval_rows=4", "training.eval_before=false"]
# 10 steps of the default task: colocated, it gained +0.29 and +0.31 held-out accuracy on two seeds
# (run.seed 0 and 1), as separate actors do (test_training.py's RECIPE_STEPS).
STEPS = 10


def run(tmp_path, overrides, resume=False):
    cfg = load_config(REPO / "configs/default.yaml", [f"run.output_dir={tmp_path}", *COLOCATE, *overrides])
    return driver.train(cfg, resume=resume)


def metrics(run_dir) -> dict[int, dict]:
    return {m["step"]: m for m in map(json.loads, (Path(run_dir) / "metrics.jsonl").read_text().splitlines())}


def test_colocated_run_trains_and_times_every_phase(tmp_path, ray_session):
    summary = run(tmp_path, ["checkpoint.every=0", f"training.steps={STEPS}"])
    print(summary)
    assert summary["accuracy_after"] >= summary["accuracy_before"] + 0.05
    for step, m in metrics(summary["run_dir"]).items():
        for key in (keys.ROLLOUT_S, "time/update_s", keys.SYNC_S, keys.STEP_S):
            assert m[key] > 0, (step, key)  # the actor times the rollout and the update, the driver the rest
        assert "time/reference_s" not in m  # one call a step: nothing runs between the rollout and the update
        assert m[keys.LEARNER_UPDATE_S] > 0 and m[keys.TOKENS_PER_S] > 0  # and the actor its two parts
        assert m[keys.REWARD_S] > 0  # scoring, inside the actor
        assert m[keys.WEIGHTS_VERSION] == step and m[keys.STALENESS] == 0
        # the engine generates from the trained module itself: no copy to drift from
        assert m["rollout/logprob_diff_max"] < 1e-4, step


def test_colocated_resume_continues_exactly(tmp_path, ray_session):
    """Steps 3-4 run twice: straight through, then resumed from the step-2 checkpoint."""
    full = run(tmp_path, [*SMALL, "checkpoint.every=2", "training.steps=4", "run.name=full"])
    shutil.rmtree(Path(full["run_dir"]) / "checkpoints" / "step_00000004")
    run(tmp_path, [*SMALL, "checkpoint.every=2", "training.steps=4", "run.name=full"], resume=True)
    records = [json.loads(line) for line in (Path(full["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    for step in (3, 4):
        first, again = [m for m in records if m["step"] == step]
        for key in ("actor/loss", "actor/pg_loss", "actor/grad_norm", "reward/mean", "response/length_mean"):
            assert first[key] == again[key], (step, key, first[key], again[key])


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
            driver.train(cfg, report=report)
        finally:
            disarm()
        return rewards, restores

    undisturbed, _ = reported("calm", fault=False)
    rewards, restores = reported("killed", fault=True)
    assert rewards == undisturbed and restores == [0.0, 1.0, 0.0]
