"""task.name=bfcl end to end: the tiny model trains 2 steps on BFCL rows through real Ray actors,
offline, each reply's calls scored by BFCL's AST checker, with held-out accuracy per category."""

import json
from pathlib import Path

import pytest

from relay.config import load_config
from relay_trainer import loop

pytest.importorskip("bfcl_eval")

BFCL = [
    "model.path=tiny",
    "task.name=bfcl",
    "task.categories=[simple_python, parallel]",
    "tools.parser=hermes",
    "task.num_train_rows=8",
    "task.num_eval_rows=4",
    "sft.steps=1",  # the task's demonstrations: BFCL's possible answers as calls
    "sft.batch_size=2",
    "rollout.n=2",
    "rollout.max_new_tokens=8",
    "training.steps=2",
    "training.prompts_per_step=2",
    "training.micro_batch_size=64",
    "checkpoint.every=0",
    "checkpoint.save_hf_model=false",
    "logging.console=false",
]


def test_the_tiny_model_trains_a_supervised_step_and_two_rl_steps_on_bfcl(tmp_path, ray_session):
    summary = loop.train(load_config(None, [f"run.output_dir={tmp_path}", *BFCL]))
    steps = [json.loads(line) for line in (Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    assert len(steps) == 2
    assert (Path(summary["run_dir"]) / "sft_metrics.jsonl").read_text().count("sft/nll") == 1
    assert all(m["reward/errors"] == 0 for m in steps)  # the checker scored every reply
    assert "actor/loss" in steps[-1]
    assert {"reward/simple_python", "reward/parallel"} <= set(steps[-1])
    assert {"simple_python/accuracy_before", "parallel/accuracy_after"} <= set(summary)  # held out, per category
