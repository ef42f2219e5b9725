"""`driver.py resources.learner.count=2`: the learner as a rank group of two FSDP2 ranks (gloo)."""

import json
from pathlib import Path

import pytest

from tests.e2e.test_training import metrics, run


# About 5 minutes on 2 loaded cores (100 s of it starting the actors): the default tier's 2-rank
# test is tests/unit/test_fsdp_ranks.py.
@pytest.mark.slow
def test_two_learner_ranks_train_the_default_task(tmp_path, ray_session):
    summary = run(
        tmp_path, overrides=["resources.learner.count=2", "checkpoint.every=30", "checkpoint.save_hf_model=true"]
    )
    print(summary)
    assert summary["accuracy_after"] >= summary["accuracy_before"] + 0.1
    run_dir = Path(summary["run_dir"])
    # Weights reached the rollout worker whole: its logprobs are the (sharded) learner's.
    assert metrics(run_dir)[1]["rollout/logprob_diff_max"] < 1e-3
    manifest = json.loads((run_dir / "checkpoints" / "step_00000060" / "manifest.json").read_text())
    assert {"learner/.metadata", "learner/rank_0.json", "learner/rank_1.json"} <= manifest["files"].keys()
    index = json.loads((run_dir / "final_model" / "model.safetensors.index.json").read_text())
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(run_dir / "final_model")
    assert {name for name, _ in model.named_parameters()} <= set(index["weight_map"]) | {"lm_head.weight"}


@pytest.mark.slow
def test_two_learner_ranks_broadcast_like_the_object_store_and_resume_exactly(tmp_path, ray_session):
    """Learner ranks -> 2 rollout workers through the gloo broadcast group: the same run, number
    for number, as the object store; and a 2-rank run resumed from its step-2 checkpoint."""
    small = [
        "training.prompts_per_step=4",
        "rollout.n=4",
        "task.num_eval_rows=8",
        "training.steps=4",
        "checkpoint.every=2",
        "resources.rollout.count=2",
        "resources.learner.count=2",
    ]
    store = run(tmp_path, overrides=[*small, "run.name=store", "resources.weight_sync=object_store"])
    broadcast = run(tmp_path, overrides=[*small, "run.name=broadcast", "resources.weight_sync=broadcast"])
    run(tmp_path, overrides=[*small, "run.name=part", "training.steps=2", "resources.weight_sync=object_store"])
    resumed = run(tmp_path, overrides=[*small, "run.name=part", "resources.weight_sync=object_store"], resume=True)
    a, b, c = metrics(store["run_dir"]), metrics(broadcast["run_dir"]), metrics(resumed["run_dir"])
    keys = ("actor/loss", "actor/grad_norm", "reward/mean", "response/length_mean", "rollout/logprob_diff_max")
    for step in (1, 2, 3, 4):
        for key in keys:
            assert a[step][key] == b[step][key], (step, key, a[step][key], b[step][key])
    for step in (3, 4):
        for key in keys:
            assert a[step][key] == c[step][key], (step, key, a[step][key], c[step][key])
