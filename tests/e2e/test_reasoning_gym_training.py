"""task.name=reasoning_gym end to end: the tiny model trains 2 steps on one dataset and on a mix with
worked examples, through real Ray actors, offline: rows from the installed package's generators,
rewards from each dataset's own verifier, metrics split by dataset in the mix."""

import json
from pathlib import Path

import pytest

from relay.config import load_config
from relay_trainer import loop

pytest.importorskip("reasoning_gym")

TINY = [
    "model.path=tiny",
    "task.name=reasoning_gym",
    "task.num_train_rows=64",
    "task.num_eval_rows=8",
    "rollout.n=4",
    "rollout.max_new_tokens=8",
    "training.steps=2",
    "training.prompts_per_step=4",
    "training.micro_batch_size=64",
    "checkpoint.every=0",
    "checkpoint.save_hf_model=false",
    "logging.console=false",
]


def run(tmp_path, *overrides) -> tuple[dict, list[dict]]:
    summary = loop.train(load_config(None, [f"run.output_dir={tmp_path}", *TINY, *overrides]))
    lines = (Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines()
    return summary, [json.loads(line) for line in lines]


def test_the_tiny_model_trains_two_steps_on_one_dataset(tmp_path, ray_session):
    summary, steps = run(tmp_path, "task.dataset=chain_sum", "task.dataset_args={max_terms: 2, max_digits: 1}")
    assert len(steps) == 2 and all(m["reward/errors"] == 0 for m in steps)
    assert all(0 <= m["reward/mean"] <= 1 for m in steps) and "actor/loss" in steps[-1]
    assert 0 <= summary["accuracy_before"] <= 1 and 0 <= summary["accuracy_after"] <= 1


def test_the_tiny_model_trains_two_steps_on_a_mix_with_worked_examples(tmp_path, ray_session):
    mix = "task.datasets={products: {weight: 1, args: {max_digits: 1}}, letter_counting: 1}"
    summary, steps = run(tmp_path, mix, "task.few_shot=2")
    assert len(steps) == 2 and all(m["reward/errors"] == 0 for m in steps) and "actor/loss" in steps[-1]
    drawn = {k for m in steps for k in m if k in ("reward/products", "reward/letter_counting")}
    assert drawn  # each step's reward split by the datasets its prompts came from
    for name in ("products", "letter_counting"):
        assert 0 <= summary[f"{name}/accuracy_after"] <= 1 and f"{name}/majority" in summary
    prompts = (Path(summary["run_dir"]) / "samples" / "step_000001.txt").read_text()
    assert "<|im_start|>assistant\n<answer>" in prompts  # the worked examples reached the engine's prompt
