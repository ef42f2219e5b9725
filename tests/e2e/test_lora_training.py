"""`driver.py model.lora.rank=8`: LoRA adapters through real Ray actors (CPU, the tiny model)."""

import json
from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM

from relay.models.lora import MERGED_FOLDER
from tests.e2e.test_training import metrics, run

# LoRA wants a larger learning rate than full fine-tuning (the default's 2e-4): the adapters start at
# zero and hold about 9% of the tiny model's parameters.
LORA = ["model.lora.rank=8", "training.lr=5e-3"]


def test_lora_trains_the_default_task(tmp_path, ray_session):
    """Six steps with a KL term: the held-out accuracy rises, the reference (the learner's base model,
    adapters off, no Reference actor) equals the policy exactly at step 1, and the final folder holds
    the adapters and a merged model that plain transformers loads."""
    summary = run(
        tmp_path,
        overrides=[
            *LORA,
            "training.steps=6",
            "task.num_eval_rows=32",
            "checkpoint.every=0",
            "algorithm.kl_coef=0.001",
            "checkpoint.save_hf_model=true",
            "checkpoint.save_merged=true",
        ],
    )
    print(summary)
    assert summary["accuracy_after"] >= summary["accuracy_before"] + 0.1
    steps = metrics(summary["run_dir"])
    assert steps[1]["kl/mean"] == 0.0  # step-0 weights: base model == adapted model, bit for bit
    assert steps[6]["kl/mean"] > 0.0
    assert steps[1]["rollout/logprob_diff_max"] < 1e-3  # merged weights reached the engine
    final = Path(summary["run_dir"]) / "final_model"
    assert json.loads((final / "adapter_config.json").read_text())["r"] == 8
    AutoModelForCausalLM.from_pretrained(final / MERGED_FOLDER)


@pytest.mark.slow
def test_lora_run_resumes_exactly(tmp_path, ray_session):
    small = [
        *LORA,
        "training.prompts_per_step=4",
        "rollout.n=4",
        "task.num_eval_rows=4",
        "checkpoint.every=2",
        "training.steps=4",
        "algorithm.kl_coef=0.01",
    ]
    full = run(tmp_path, overrides=[*small, "run.name=full"])
    run(tmp_path, overrides=[*small, "run.name=part", "training.steps=2"])
    resumed = run(tmp_path, overrides=[*small, "run.name=part"], resume=True)
    a, b = metrics(full["run_dir"]), metrics(resumed["run_dir"])
    for step in (3, 4):
        for key in ("actor/loss", "actor/grad_norm", "reward/mean", "kl/mean", "response/length_mean"):
            assert a[step][key] == b[step][key], (step, key, a[step][key], b[step][key])


# vLLM's import and engine start: tens of seconds on 2 cores.
@pytest.mark.slow
def test_lora_adapters_alone_reach_vllm(tmp_path, ray_session):
    """rollout.engine=vllm with LoRA: each sync sends the adapters alone (model.lora.sync=auto), vLLM
    serves them on its base weights, and the engine's logprobs stay the learner's every step."""
    pytest.importorskip("vllm")
    summary = run(tmp_path, overrides=[*LORA, "rollout.engine=vllm", "training.steps=6", "checkpoint.every=0"])
    print(summary)
    steps = metrics(summary["run_dir"])
    assert all(steps[s]["rollout/logprob_diff_max"] < 1e-3 for s in range(1, 7))
    assert summary["accuracy_after"] >= summary["accuracy_before"] + 0.1
