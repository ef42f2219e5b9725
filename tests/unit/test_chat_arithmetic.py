"""The chat_arithmetic task: held-out problems are never training rows; the reward reads the last integer."""

from types import SimpleNamespace

import pytest

from relay.config import ConfigError, load_config
from relay.envs.chat_arithmetic import chat_arithmetic_reward, make_rows, problem_space, split_problems
from relay.run.rows import task_rows


def test_held_out_problems_are_never_trained_on_and_fixed_by_the_seed():
    train, held_out = make_rows(5000, 200, 0, "+-*", 2, 20)
    assert len(held_out) == 200 and len({r["prompt"] for r in held_out}) == 200
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in held_out}
    assert make_rows(50, 200, 0, "+-*", 2, 20) == (train[:50], held_out)
    assert make_rows(50, 200, 1, "+-*", 2, 20)[1] != held_out
    rest, evals = split_problems("*", 2, 4, 3, 0)
    assert sorted(rest + evals) == sorted(problem_space("*", 2, 4))


def test_rows_ask_in_words_and_hold_the_answer():
    _, held_out = make_rows(0, 1083, 0, "+-*", 2, 20)  # the whole space
    by_prompt = {r["prompt"]: r["ground_truth"] for r in held_out}
    assert by_prompt["What is 14 * 9? Answer with the number only."] == "126"
    assert by_prompt["What is 3 - 20? Answer with the number only."] == "-17"


@pytest.mark.parametrize(
    ("text", "reward"),
    [
        ("126", 1.0),
        ("14 * 9 = 126", 1.0),
        ("126.", 1.0),
        ("The answer is 125", 0.0),
        ("To multiply 14 by", 0.0),
        ("", 0.0),
    ],
)
def test_the_reward_reads_the_last_integer(text, reward):
    assert chat_arithmetic_reward(SimpleNamespace(final_text=text, ground_truth="126")) == reward


def test_config_builds_disjoint_rows_and_names_bad_settings():
    cfg = load_config(None, ["task.name=chat_arithmetic", "task.num_train_rows=300", "task.num_eval_rows=200"])
    assert cfg.task.reward_fn_path == "relay.envs.chat_arithmetic:chat_arithmetic_reward"
    train, evals = task_rows(cfg.task, cfg.tools, cfg.run.seed)
    assert len(train) == 300 and len(evals) == 200
    with pytest.raises(ConfigError, match=r"task\.ops: choose from \+ - \*"):
        load_config(None, ["task.name=chat_arithmetic", "task.ops=/"])
    with pytest.raises(ConfigError, match="task.num_eval_rows: 300 held-out problems leave none to train on"):
        load_config(
            None, ["task.name=chat_arithmetic", "task.ops='*'", "task.operand_max=18", "task.num_eval_rows=300"]
        )
