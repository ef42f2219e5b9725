"""task.name=reasoning_gym: rows from the package's generators, held-out questions never trained
on, the package's own verifier on the extracted answer, per-dataset metrics in a mix, and each
bad setting named in one line; the shipped SmolLM2 recipe's mix."""

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from relay.config import ConfigError, load_config
from relay.envs.reasoning_gym import (
    INSTRUCTION,
    by_dataset,
    extract_answer,
    reasoning_gym_reward,
    reasoning_gym_reward_exact,
    shares,
)
from relay.envs.tool_tasks import overlap, question
from relay.run.rows import task_rows

pytest.importorskip("reasoning_gym")

MIX = "task.datasets={basic_arithmetic: 2, chain_sum: {weight: 1, args: {min_terms: 2, max_terms: 2}}}"


def rg_config(*overrides):
    return load_config(None, ["task.name=reasoning_gym", *overrides])


def problems(*overrides) -> list[str]:
    with pytest.raises(ConfigError) as e:
        rg_config(*overrides)
    return e.value.problems


def test_mix_rows_split_by_weight_and_held_out_questions_never_trained_on():
    cfg = rg_config(MIX, "task.num_train_rows=600", "task.num_eval_rows=90")
    train, held_out = task_rows(cfg.task, cfg.tools, cfg.run.seed)
    count = lambda rows, name: sum(r["ground_truth"]["dataset"] == name for r in rows)  # noqa: E731
    assert (count(held_out, "basic_arithmetic"), count(held_out, "chain_sum")) == (60, 30)
    assert count(train, "basic_arithmetic") > 350 and count(train, "chain_sum") > 150
    assert overlap(train, held_out) is None
    assert not {question(r) for r in held_out} & {question(r) for r in train}


def test_a_small_question_space_drops_training_rows_that_ask_a_held_out_question():
    # one-digit sums of two terms: few enough questions that other seeds repeat the held-out ones
    args = "task.dataset_args={min_terms: 2, max_terms: 2, min_digits: 1, max_digits: 1, operators: ['+']}"
    cfg = rg_config("task.dataset=basic_arithmetic", args, "task.num_train_rows=500", "task.num_eval_rows=40")
    train, held_out = task_rows(cfg.task, cfg.tools, cfg.run.seed)
    assert len(held_out) == 40 and 0 < len(train) < 500
    assert not {question(r) for r in held_out} & {question(r) for r in train}


def test_rows_are_chat_messages_with_the_answer_format_and_run_seeds_differ():
    cfg = rg_config("task.dataset=chain_sum", "task.num_train_rows=20", "task.num_eval_rows=4")
    train, held_out = task_rows(cfg.task, cfg.tools, cfg.run.seed)
    system, user = held_out[0]["messages"]
    assert system == {"role": "system", "content": INSTRUCTION}
    assert user == {"role": "user", "content": held_out[0]["ground_truth"]["entry"]["question"]}
    other = rg_config("task.dataset=chain_sum", "task.num_train_rows=20", "task.num_eval_rows=4", "run.seed=1")
    assert {question(r) for r in task_rows(other.task, other.tools, other.run.seed)[0]} != {question(r) for r in train}
    own = rg_config(
        "task.dataset=chain_sum", "task.num_train_rows=4", "task.num_eval_rows=1", "task.system_prompt=Be brief."
    )
    assert task_rows(own.task, own.tools, own.run.seed)[1][0]["messages"][0]["content"] == "Be brief."


def test_worked_examples_are_a_datasets_first_training_rows_answered_in_tags():
    cfg = rg_config(MIX, "task.num_train_rows=60", "task.num_eval_rows=6", "task.few_shot=2")
    train, held_out = task_rows(cfg.task, cfg.tools, cfg.run.seed)
    for name in ("basic_arithmetic", "chain_sum"):
        own = [r for r in train if r["ground_truth"]["dataset"] == name]
        first = [r["ground_truth"]["entry"] for r in own[:2]]
        for row in own + [r for r in held_out if r["ground_truth"]["dataset"] == name]:
            system, ask1, say1, ask2, say2, asked = row["messages"]
            assert system["content"] == INSTRUCTION and asked["role"] == "user"
            assert [ask1["content"], ask2["content"]] == [e["question"] for e in first]
            assert [say1, say2] == [{"role": "assistant", "content": f"<answer>{e['answer']}</answer>"} for e in first]
            assert asked["content"] == row["ground_truth"]["entry"]["question"]
    held = {r["ground_truth"]["entry"]["question"] for r in held_out}
    assert not held & {r["ground_truth"]["entry"]["question"] for r in train}
    assert overlap(train, held_out) is None
    assert problems("task.dataset=chain_sum", "task.few_shot=-1") == [
        "task.few_shot: the number of worked examples must be an integer >= 0, got -1"
    ]
    with pytest.raises(ConfigError, match="task.few_shot: 5 worked examples, but task.dataset has 4 training rows"):
        small = rg_config("task.dataset=chain_sum", "task.num_train_rows=4", "task.num_eval_rows=1", "task.few_shot=5")
        task_rows(small.task, small.tools, small.run.seed)
    with pytest.raises(ConfigError, match="task.few_shot: only task.name=reasoning_gym reads it"):
        load_config(None, ["task.few_shot=2"])


def test_extract_answer_takes_the_last_answer_block_else_the_final_line():
    assert extract_answer("think <answer>1</answer> more <answer> 42 </answer>\nbye") == "42"
    assert extract_answer("<answer>\nmulti\nline\n</answer>") == "multi\nline"
    assert extract_answer("so the sum is\n\n  17  \n\n") == "17"
    assert extract_answer("") == ""


def test_reward_is_the_datasets_own_score_of_the_extracted_answer():
    cfg = rg_config("task.dataset=chain_sum", "task.num_train_rows=4", "task.num_eval_rows=2")
    assert cfg.task.reward_fn_path == "relay.envs.reasoning_gym:reasoning_gym_reward"
    truth = task_rows(cfg.task, cfg.tools, cfg.run.seed)[1][0]["ground_truth"]
    answer = truth["entry"]["answer"]
    sample = lambda text: SimpleNamespace(ground_truth=truth, final_text=text)  # noqa: E731
    assert reasoning_gym_reward(sample(f"it is\n<answer>{answer}</answer>")) == 1.0
    assert reasoning_gym_reward(sample(f"working...\n{answer}")) == 1.0
    assert reasoning_gym_reward(sample("<answer>nope</answer>")) == 0.0


def test_without_partial_credit_only_a_right_answer_earns_anything():
    cfg = rg_config("task.dataset=products", "task.num_train_rows=4", "task.num_eval_rows=2")
    truth = task_rows(cfg.task, cfg.tools, cfg.run.seed)[1][0]["ground_truth"]
    answer = truth["entry"]["answer"]
    sample = lambda text: SimpleNamespace(ground_truth=truth, final_text=text, meta={})  # noqa: E731
    sentence = sample(f"the product is {answer}")
    assert 0.0 < reasoning_gym_reward(sentence) < 1.0  # the verifier's partial credit
    assert reasoning_gym_reward_exact(sentence) == 0.0
    assert reasoning_gym_reward_exact(sample(f"<answer>{answer}</answer>")) == 1.0
    exact = rg_config("task.dataset=products", "task.partial_credit=false")
    assert exact.task.reward_fn_path == "relay.envs.reasoning_gym:reasoning_gym_reward_exact"
    with pytest.raises(ConfigError, match="task.partial_credit: only task.name=reasoning_gym reads it"):
        load_config(None, ["task.partial_credit=false"])


def test_metrics_are_split_by_dataset_only_in_a_mix():
    s = lambda name, reward: SimpleNamespace(ground_truth={"dataset": name}, reward=reward)  # noqa: E731
    mean = lambda r: sum(r) / len(r)  # noqa: E731
    mixed = [s("a", 1.0), s("a", 0.0), s("b", 1.0)]
    assert by_dataset(mixed, "reward/{}", mean) == {"reward/a": 0.5, "reward/b": 1.0}
    assert by_dataset(mixed, "eval/{}/accuracy", mean)["eval/b/accuracy"] == 1.0
    assert by_dataset([s("a", 1.0), s("a", 0.0)], "reward/{}", mean) == {}
    assert by_dataset([SimpleNamespace(ground_truth="7", reward=1.0)], "reward/{}", mean) == {}


def test_shares_split_a_count_by_weight():
    assert shares(10, {"a": 2.0, "b": 1.0}) == {"a": 7, "b": 3}
    assert shares(3, {"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0}) == {"a": 1, "b": 1, "c": 1, "d": 0}
    assert sum(shares(256, {"a": 0.3, "b": 0.3, "c": 0.4}).values()) == 256


def test_bad_settings_are_one_line_each_naming_the_key():
    (p,) = problems("task.dataset=basic_arithmetc")
    assert p.startswith("task.dataset: 'basic_arithmetc' is not a reasoning-gym dataset (closest: basic_arithmetic")
    (p,) = problems("task.dataset=chain_sum", "task.dataset_args={digits: 2}")
    assert p.startswith("task.dataset_args: chain_sum takes no argument 'digits' (it takes: min_terms, max_terms")
    (p,) = problems("task.dataset=chain_sum", "task.dataset_args={min_terms: 5, max_terms: 2}")
    assert p.startswith("task.dataset_args: chain_sum: ") and "\n" not in p
    (p,) = problems("task.dataset=chain_sum", "task.dataset_args={seed: 3}")
    assert p.startswith("task.dataset_args: seed is relay's to set")
    assert problems("task.datasets={chain_sum: 0, leg_counting: {weight: -1}}") == [
        "task.datasets.chain_sum: the weight must be a number > 0, got 0",
        "task.datasets.leg_counting: the weight must be a number > 0, got -1",
    ]
    (p,) = problems("task.datasets={chain_sum: {weight: 1, args: {nope: 1}}}")
    assert p.startswith("task.datasets.chain_sum.args: chain_sum takes no argument 'nope'")
    assert problems() == [
        "task.dataset: task.name=reasoning_gym needs task.dataset (one generator) or task.datasets (a mix)"
    ]
    assert problems("task.dataset=chain_sum", "task.datasets={chain_sum: 1}") == [
        "task.datasets: give task.dataset or task.datasets, not both"
    ]
    with pytest.raises(ConfigError, match="only task.name=reasoning_gym reads it"):
        load_config(None, ["task.dataset=chain_sum"])


def test_a_missing_package_says_which_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "reasoning_gym.factory", None)  # import fails as if not installed
    (p,) = problems("task.dataset=chain_sum")
    assert p == "task.name: reasoning_gym needs the reasoning-gym package: " + (
        "pip install 'reasoning-gym==0.1.25' (or pip install -e '.[tasks]')"
    )


def test_the_shipped_smollm2_recipe_mixes_three_datasets_with_worked_examples_and_equal_held_out_shares():
    cfg = load_config(Path(__file__).resolve().parents[2] / "configs" / "smol_reasoning_gym.yaml")
    train, held_out = task_rows(cfg.task, cfg.tools, cfg.run.seed)
    names = ["products", "chain_sum", "letter_counting"]
    assert [sum(r["ground_truth"]["dataset"] == n for r in held_out) for n in names] == [32] * 3
    assert {r["ground_truth"]["dataset"] for r in train} == set(names) and overlap(train, held_out) is None
    assert all(len(r["messages"]) == 2 + 2 * cfg.task.few_shot for r in held_out) and cfg.task.few_shot == 2
