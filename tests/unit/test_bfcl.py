"""task.name=bfcl: BFCL's rows with a split fixed by row id (no held-out question trained on), the
row's functions in the system prompt in the run's call format, BFCL's own AST checker on
hand-written right and wrong calls, per-category metrics, and each bad setting in one line."""

import json
import sys
from types import SimpleNamespace

import pytest

from relay.config import ConfigError, load_config
from relay.envs.bfcl import CALL_SYNTAX, bfcl_reward, demonstrations, read_category, split
from relay.envs.reasoning_gym import by_dataset
from relay.envs.tool_tasks import overlap, question
from relay.run.rows import task_rows

pytest.importorskip("bfcl_eval")


def bfcl_config(*overrides):
    return load_config(None, ["task.name=bfcl", "tools.parser=hermes", *overrides])


def problems(*overrides) -> list[str]:
    with pytest.raises(ConfigError) as e:
        bfcl_config(*overrides)
    return e.value.problems


def held_out_row(category: str, row_id: str, *overrides) -> dict:
    cfg = bfcl_config(f"task.categories=[{category}]", "task.num_train_rows=4", "task.num_eval_rows=60", *overrides)
    return next(r for r in task_rows(cfg.task, cfg.tools, cfg.run.seed)[1] if r["ground_truth"]["id"] == row_id)


def reward(row: dict, text: str) -> float:
    return bfcl_reward(SimpleNamespace(ground_truth=row["ground_truth"], final_text=text))


def hermes(name: str, arguments: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def test_the_split_is_fixed_by_row_id_and_no_held_out_question_is_trained_on():
    cfg = bfcl_config("task.num_train_rows=900", "task.num_eval_rows=192")
    train, held_out = task_rows(cfg.task, cfg.tools, cfg.run.seed)
    count = lambda rows, c: sum(r["ground_truth"]["dataset"] == c for r in rows)  # noqa: E731
    assert [count(held_out, c) for c in ("simple_python", "multiple", "parallel")] == [64, 64, 64]
    assert [count(train, c) for c in ("simple_python", "multiple", "parallel")] == [300, 300, 300]
    assert overlap(train, held_out) is None
    assert not {question(r) for r in held_out} & {question(r) for r in train}
    # whatever the seed or the sizes: the held-out pool is the same rows, and training never reaches it
    other = bfcl_config("run.seed=3", "task.num_train_rows=900", "task.num_eval_rows=30")
    other_train, other_held_out = task_rows(other.task, other.tools, other.run.seed)
    ids = lambda rows: {r["ground_truth"]["id"] for r in rows}  # noqa: E731
    assert ids(other_held_out) < ids(held_out)
    pools = {c: {r["id"] for r in split(read_category(c))[1]} for c in ("simple_python", "multiple", "parallel")}
    assert not (ids(train) | ids(other_train)) & set().union(*pools.values())
    assert [r["ground_truth"]["id"] for r in other_train[:5]] != [r["ground_truth"]["id"] for r in train[:5]]


def test_held_out_rows_are_a_third_of_each_category_and_asking_more_is_one_line():
    train_pool, held = split(read_category("parallel"))
    assert (len(train_pool), len(held)) == (133, 67)
    with pytest.raises(ConfigError) as e:
        too_many = bfcl_config("task.categories=[parallel]", "task.num_eval_rows=100")
        task_rows(too_many.task, too_many.tools, too_many.run.seed)
    assert (
        e.value.problems[0]
        == "task.num_eval_rows: parallel holds out 67 rows, 100 asked (split by task.categories' weights)"
    )


def test_the_prompt_shows_the_rows_functions_in_the_runs_call_format():
    cfg = bfcl_config("task.categories=[parallel]", "task.num_train_rows=2", "task.num_eval_rows=2")
    row = task_rows(cfg.task, cfg.tools, cfg.run.seed)[1][0]
    system, user = row["messages"]
    assert CALL_SYNTAX["hermes"] in system["content"]
    for f in row["ground_truth"]["functions"]:
        assert json.dumps(f) in system["content"]
    assert user["role"] == "user" and user["content"]
    pythonic = bfcl_config("tools.parser=function_call", "task.num_train_rows=2", "task.num_eval_rows=1")
    instruction = task_rows(pythonic.task, pythonic.tools, pythonic.run.seed)[1][0]["messages"][0]["content"]
    assert "[func_name1(param1=" in instruction
    own = bfcl_config("task.system_prompt=Call them.", "task.num_train_rows=2", "task.num_eval_rows=1")
    instruction = task_rows(own.task, own.tools, own.run.seed)[1][0]["messages"][0]["content"]
    assert instruction.startswith("Call them.\n\nThe functions you can call:")


def test_the_checker_accepts_right_calls_and_refuses_wrong_ones():
    # simple_python_28, held out: calculate_displacement(initial_velocity=10, time=5, acceleration=9.8)
    row = held_out_row("simple_python", "simple_python_28")
    right = {"initial_velocity": 10, "time": 5, "acceleration": 9.8}
    assert reward(row, hermes("calculate_displacement", right)) == 1.0
    assert reward(row, "Sure.\n" + hermes("calculate_displacement", {**right, "time": 6})) == 0.0  # a wrong value
    assert reward(row, hermes("calculate_displacement", {"initial_velocity": 10})) == 0.0  # a required one missing
    assert reward(row, hermes("calculate_distance", right)) == 0.0  # another function
    assert reward(row, hermes("calculate_displacement", {**right, "time": "5"})) == 0.0  # a string, not an integer
    assert reward(row, hermes("calculate_displacement", {**right, "mass": 2})) == 0.0  # an argument it does not take
    assert reward(row, "The displacement is 172.5 m.") == 0.0  # no call
    assert reward(row, hermes("calculate_displacement", right) * 2) == 0.0  # one call asked, two made


def test_parallel_calls_match_in_any_order_and_each_one_counts():
    # parallel_13, held out: confidence_interval.calculate for sample sizes 50 and 150
    row = held_out_row("parallel", "parallel_13")
    first = {"sample_std_dev": 10, "sample_size": 50, "sample_mean": 25, "confidence_level": 0.95}
    second = {**first, "sample_size": 150}
    name = "confidence_interval.calculate"
    assert reward(row, hermes(name, first) + hermes(name, second)) == 1.0
    assert reward(row, hermes(name, second) + "\n" + hermes(name, first)) == 1.0  # any order
    assert reward(row, hermes(name, first)) == 0.0  # one of the two
    assert reward(row, hermes(name, first) + hermes(name, {**second, "sample_size": 100})) == 0.0
    pythonic = held_out_row("parallel", "parallel_13", "tools.parser=function_call")
    text = f"[{name}(sample_std_dev=10, sample_size=50, sample_mean=25, confidence_level=0.95), " + (
        f"{name}(sample_std_dev=10, sample_size=150, sample_mean=25, confidence_level=0.95)]"
    )
    assert reward(pythonic, text) == 1.0
    assert reward(pythonic, hermes(name, first) + hermes(name, second)) == 0.0  # not the format this run shows


def test_irrelevance_rows_score_a_reply_without_calls():
    cfg = bfcl_config("task.categories=[irrelevance]", "task.num_train_rows=2", "task.num_eval_rows=1")
    row = task_rows(cfg.task, cfg.tools, cfg.run.seed)[1][0]
    assert reward(row, "None of these functions can answer that.") == 1.0
    assert reward(row, hermes(row["ground_truth"]["functions"][0]["name"], {})) == 0.0


@pytest.mark.parametrize("parser", ["hermes", "function_call", "json"])
def test_demonstrations_answer_training_rows_with_calls_the_checker_accepts(parser):
    cats = "task.categories=[simple_python, multiple, parallel, parallel_multiple, irrelevance]"
    cfg = bfcl_config(cats, f"tools.parser={parser}", "task.num_train_rows=300", "task.num_eval_rows=5")
    train = task_rows(cfg.task, cfg.tools, cfg.run.seed)[0]
    demos = demonstrations(train)
    assert len(demos) >= 0.98 * len(train)  # the few left out: no first allowed value the checker takes
    by_question = {question(r): r for r in train}
    for demo in demos:
        *prompt, answer = demo["messages"]
        row = by_question[question({"messages": prompt})]
        assert answer["role"] == "assistant" and reward(row, answer["content"]) == 1.0


def test_metrics_are_split_by_category_in_a_mix():
    cfg = bfcl_config(
        "task.categories={simple_python: 1, parallel: 1}", "task.num_train_rows=4", "task.num_eval_rows=4"
    )
    held_out = task_rows(cfg.task, cfg.tools, cfg.run.seed)[1]
    samples = [SimpleNamespace(ground_truth=r["ground_truth"], reward=float(i % 2)) for i, r in enumerate(held_out)]
    mean = lambda r: sum(r) / len(r)  # noqa: E731
    assert by_dataset(samples, "eval/{}/accuracy", mean) == {
        "eval/parallel/accuracy": 0.5,
        "eval/simple_python/accuracy": 0.5,
    }
    assert cfg.task.reward_fn_path == "relay.envs.bfcl:bfcl_reward"


def test_the_checker_imports_without_the_vendors_sdks():
    from relay.envs.bfcl import _checker

    _checker()
    assert "bfcl_eval.constants.model_config" not in sys.modules  # the stand-in is gone after the import
    assert not [m for m in sys.modules if m.startswith("bfcl_eval.model_handler")]


def test_bad_settings_are_one_line_each_naming_the_key():
    (p,) = problems("task.categories=[simple]")
    assert p.startswith("task.categories: 'simple' is not a BFCL category relay runs (closest: ")
    assert "simple_python" in p and "\n" not in p
    assert problems("task.categories={parallel: 0, multiple: -1}") == [
        "task.categories.parallel: the weight must be a number > 0, got 0",
        "task.categories.multiple: the weight must be a number > 0, got -1",
    ]
    (p,) = problems("tools.parser=tag")
    assert p.startswith("tools.parser: task.name=bfcl shows and reads calls in one of hermes, json, function_call")
    (p,) = problems("tools.enabled=true")
    assert p.startswith("tools.enabled: task.name=bfcl checks the calls of one turn and runs none")
    with pytest.raises(ConfigError, match="only task.name=bfcl reads it"):
        load_config(None, ["task.categories=[parallel]"])


def test_a_missing_package_says_which_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "bfcl_eval", None)  # import fails as if not installed
    (p,) = problems()
    assert p == "task.name: bfcl needs the bfcl-eval package: " + (
        "pip install --no-deps 'bfcl-eval==2026.3.23' (scripts/setup.sh installs it)"
    )
