"""reasoning_gym's constant-answer baseline: the share of held-out rows whose answer is their
dataset's most common training answer (what one repeated answer would score), per dataset in a mix
and over all held-out rows; summary.json holds it as majority and <dataset>/majority, and the last
line prints it beside each accuracy where it is at least MAJORITY_SHOWN."""

import json
from collections import Counter

import pytest

from relay.config import load_config
from relay.envs.arithmetic import make_rows as arithmetic_rows
from relay.envs.reasoning_gym import majority_metrics, make_rows
from relay.run.summary import MAJORITY_SHOWN, summarize

pytest.importorskip("reasoning_gym")


def rows(*overrides):
    task = load_config(
        None, ["task.name=reasoning_gym", "task.num_train_rows=48", "task.num_eval_rows=16", *overrides]
    ).task
    return make_rows(task, seed=0)


def answers(rows, name):
    return [r["ground_truth"]["entry"]["answer"] for r in rows if r["ground_truth"]["dataset"] == name]


def test_the_baseline_is_the_held_out_share_of_the_training_majority_answer():
    train, held_out = rows("task.datasets.syllogism=1", "task.datasets.products=1")
    expected, hits = {}, 0
    for name in ("products", "syllogism"):
        top, _ = Counter(answers(train, name)).most_common(1)[0]
        asked = answers(held_out, name)
        expected[f"eval/{name}/majority"] = sum(a == top for a in asked) / len(asked)
        hits += sum(a == top for a in asked)
    baseline = majority_metrics(train, held_out)
    assert baseline == {"eval/majority": hits / len(held_out), **expected}
    assert set(answers(train, "syllogism")) == {"Yes", "No"}  # one word answers it
    assert baseline["eval/syllogism/majority"] >= MAJORITY_SHOWN > baseline["eval/products/majority"]


def test_one_dataset_has_the_overall_baseline_only_and_other_tasks_none():
    train, held_out = rows("task.dataset=syllogism")
    top, _ = Counter(answers(train, "syllogism")).most_common(1)[0]
    assert majority_metrics(train, held_out) == {"eval/majority": answers(held_out, "syllogism").count(top) / 16}
    assert majority_metrics(arithmetic_rows(8, 0, 2), arithmetic_rows(4, 1, 2)) == {}


def test_the_summary_holds_the_baseline_and_prints_it_beside_its_accuracy(tmp_path, capsys):
    train, held_out = rows("task.datasets.syllogism=1", "task.datasets.products=1")
    baseline = majority_metrics(train, held_out)
    after = {"eval/accuracy": 0.5, "eval/products/accuracy": 0.25, "eval/syllogism/accuracy": 0.75}
    summary = summarize([0.1, 0.2], {k: 0.0 for k in after}, after, tmp_path, baseline=baseline)
    line = capsys.readouterr().out.strip()
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert summary["syllogism/majority"] == baseline["eval/syllogism/majority"]
    assert summary["products/majority"] == baseline["eval/products/majority"]
    assert summary["majority"] == baseline["eval/majority"]
    syllogism = baseline["eval/syllogism/majority"]
    assert f"syllogism/accuracy 0.000 -> 0.750 (always the majority answer: {syllogism:.3f})" in line
    assert "products/accuracy 0.000 -> 0.250;" in line  # a baseline under MAJORITY_SHOWN is not printed
    assert "majority" not in summarize([0.1], {}, {"eval/accuracy": 0.5}, tmp_path)  # no baseline: as before
