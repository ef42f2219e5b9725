"""task.name=bfcl, multi-turn categories (relay/envs/bfcl_multi_turn.py): a scripted policy that
replays a row's ground-truth calls through the agent loop gets 1.0 from BFCL's own checks, a wrong
call 0.0; unknown functions, bad arguments and unreadable calls are counted tool errors the episode
survives; miss_func's functions arrive at their turn; held-out scenarios are never trained on in
any variant; a simulated call past task.api_call_timeout_s is stopped and counted as a tool error;
a bad category is one line."""

import ast
import inspect
import json

import pytest

from relay.agent.loop import AgentLimits, AgentLoop
from relay.config import ConfigError, load_config
from relay.engines.base import SamplingParams
from relay.envs.base import EnvRunner, episode_return
from relay.envs.bfcl import split
from relay.envs.bfcl_multi_turn import BfclEnv, entries, read_category, scenario
from relay.envs.contract import EnvMaker
from relay.envs.tool_tasks import overlap
from relay.models.tokenizer import build_tiny_tokenizer
from relay.run.rows import task_rows
from tests.agent_scripts import EOS, ScriptedEngine

pytest.importorskip("bfcl_eval")

ROW = "multi_turn_base_0"  # a file-system scenario: cd, mkdir, mv; grep; sort; mv, diff


def bfcl_config(*overrides):
    return load_config(None, ["task.name=bfcl", "tools.parser=hermes", *overrides])


def hermes(calls: list[tuple[str, dict]]) -> str:
    return "\n".join(f"<tool_call>\n{json.dumps({'name': n, 'arguments': a})}\n</tool_call>" for n, a in calls)


def truth_calls(row_id: str, category: str = "multi_turn_base") -> list[list[tuple[str, dict]]]:
    """The row's ground-truth call strings as (name, JSON arguments) per user turn, positional
    arguments named by the simulated method's signature."""
    row = entries(category)[row_id]
    env = BfclEnv()
    env.reset({"dataset": category, "id": row_id, "parser": "hermes"})
    turns = []
    for turn in row["answer"]:
        calls = []
        for text in turn:
            node = ast.parse(text, mode="eval").body
            args = [ast.literal_eval(a) for a in node.args]
            kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
            method = getattr(env.methods[node.func.id], node.func.id)
            calls.append((node.func.id, dict(inspect.signature(method).bind(*args, **kwargs).arguments)))
        turns.append(calls)
    return turns


def replay(turns: list[list[tuple[str, dict]]]) -> list[str]:
    """The policy's turns: each user turn's calls in one turn, then a reply without a call."""
    return [text for calls in turns for text in ([hermes(calls)] if calls else []) + ["Done."]]


def episode(row_id: str, texts: list[str], env_config: dict | None = None):
    tok = build_tiny_tokenizer()
    engine = ScriptedEngine(tok, lambda turn, prompt: texts[min(turn, len(texts) - 1)] + EOS)
    runner = EnvRunner(EnvMaker(BfclEnv, env_config))
    loop = AgentLoop(
        engine,
        tok,
        AgentLimits(max_turns=32, max_tokens_per_turn=1024, max_total_tokens=100_000),
        env_reset=runner.reset,
        env_step=runner.step,
        env_close=runner.close,
    )
    row = {"ground_truth": {"dataset": "multi_turn_base", "id": row_id, "parser": "hermes"}, "instruction": "Call."}
    [sample] = loop.run([row], SamplingParams(), n=1)
    return sample, tok


def test_replaying_the_ground_truth_through_the_agent_loop_gets_1_and_bad_calls_are_counted_errors():
    turns = truth_calls(ROW)
    # a call to an unknown function and one with an argument cd does not take, before the right ones
    turns[0] = [("rm_rf", {"path": "/"}), ("cd", {"directory": "document"}), *turns[0]]
    sample, tok = episode(ROW, replay(turns))
    assert sample.finish_reason == "stop" and episode_return(sample) == 1.0
    assert sample.meta["env"]["infos"][-1]["verdict"] == {"valid": True}
    errors = [c for c in sample.tool_calls if not c["ok"]]
    assert [c["name"] for c in errors] == ["rm_rf", "cd"]
    assert "not one of the functions" in errors[0]["error"] and "directory" in errors[1]["error"]
    assert len(sample.tool_calls) == sum(len(t) for t in turns)
    assert sample.meta["agent"]["tool_errors"] == 2 and sample.meta["agent"]["tool_calls"] == len(sample.tool_calls)
    text = tok.decode(sample.prompt_ids + sample.response_ids)
    # the results come back as "tool" turns; the next request as a user turn
    assert '<|im_start|>tool\n{"current_working_directory": "document"}<|im_end|>' in text
    assert "Error during execution: 'rm_rf' is not one of the functions you can call" in text
    assert "<|im_start|>user\nPerform a detailed search using grep" in text
    assert sample.turn_spans and len(sample.turn_spans) == len(replay(turns))


def test_a_wrong_call_or_a_missed_turn_gets_0():
    turns = truth_calls(ROW)
    wrong = [list(t) for t in turns]
    wrong[0] = [(n, {**a, "dir_name": "tmp"} if n == "mkdir" else a) for n, a in wrong[0]]  # the state differs
    sample, _ = episode(ROW, replay(wrong))
    assert episode_return(sample) == 0.0
    assert sample.meta["env"]["infos"][-1]["verdict"]["error_type"] == "multi_turn:instance_state_mismatch"
    silent = replay([[], *turns[1:]])  # the first request answered without a call
    sample, _ = episode(ROW, silent)
    assert episode_return(sample) == 0.0
    assert sample.meta["env"]["infos"][-1]["verdict"]["error_type"] == "multi_turn:empty_turn_model_response"


def test_tool_errors_are_data_and_names_outside_the_rows_docs_are_never_called():
    env = BfclEnv()
    first = env.reset({"dataset": "multi_turn_base", "id": ROW, "parser": "hermes"}, instruction="Call.")
    assert first.startswith("Move 'final_report.pdf'") and "Call." in env.get_prompt_prefix()
    text = hermes([("__class__", {}), ("_load_scenario", {"scenario": {}}), ("mkdir", {"dir_name": 3})])
    text += "\n<tool_call>\n{not json\n</tool_call>"
    observation, reward, done, info = env.step(text)
    assert (reward, done) == (0.0, False)
    assert [m["role"] for m in observation] == ["tool"] * 4
    assert all(m["content"].startswith(("Error during execution: ", "Error: ")) for m in observation)
    assert [c["ok"] for c in info["tool_calls"]] == [False] * 4 and info["tool_calls"][-1]["name"] is None
    assert env.instances["GorillaFileSystem"]._current_dir.name == "workspace"  # nothing ran
    # BFCL's step limit: more calling turns than MAXIMUM_STEP_LIMIT (20) for one request fail the row
    steps = [env.step(hermes([("pwd", {})])) for _ in range(19)]  # the 2nd to the 20th calling turn
    assert not any(done for _, _, done, _ in steps)
    _, reward, done, info = env.step(hermes([("pwd", {})]))
    assert (reward, done, info["verdict"]["error_type"]) == (0.0, True, "multi_turn:force_quit")


def test_a_call_past_the_time_limit_is_stopped_and_counted_and_the_episode_goes_on():
    # MathAPI.power(7, 2e7) computes for about 15 s inside one C call (no signal or thread stops it)
    slow = ("power", {"base": 7, "exponent": 2 * 10**7})
    texts = [hermes([slow, ("mkdir", {"dir_name": "after"})]), "Done."]
    sample, tok = episode("multi_turn_base_15", texts, {"api_call_timeout_s": 0.3})
    power, mkdir = sample.tool_calls[:2]
    assert not power["ok"] and power["error"] == "power took longer than 0.3 s and was stopped"
    assert 0.3 <= power["seconds"] < 3.0 and mkdir["ok"]
    assert sample.meta["agent"]["tool_errors"] == 1
    assert "Error during execution: power took longer than 0.3 s and was stopped" in tok.decode(sample.response_ids)
    # the call after it ran on the episode's instances, which the forked calls bring back
    env = BfclEnv({"api_call_timeout_s": 5})
    env.reset({"dataset": "multi_turn_base", "id": "multi_turn_base_15", "parser": "hermes"})
    env.step(hermes([("mkdir", {"dir_name": "after"})]))
    assert "after" in env.instances["GorillaFileSystem"]._current_dir.contents


def test_the_time_limit_is_a_task_key_handed_to_the_environment():
    cfg = bfcl_config("task.categories=[multi_turn_base]", "task.api_call_timeout_s=2.5")
    assert cfg.task.env_config == {"api_call_timeout_s": 2.5}
    assert BfclEnv(cfg.task.env_config).call_time_limit_s == 2.5
    assert bfcl_config("task.categories=[multi_turn_base]").task.env_config == {"api_call_timeout_s": 10.0}
    with pytest.raises(ConfigError) as e:
        bfcl_config("task.categories=[multi_turn_base]", "task.api_call_timeout_s=-1")
    assert e.value.problems == [
        "task.api_call_timeout_s: must be a finite number of seconds >= 0 (0: no limit), got -1.0"
    ]


def test_miss_func_functions_arrive_at_their_turn():
    env = BfclEnv()
    env.reset({"dataset": "multi_turn_miss_func", "id": "multi_turn_miss_func_0", "parser": "hermes"}, instruction="")
    assert '"name": "sort"' not in env.get_prompt_prefix()
    _, _, _, info = env.step(hermes([("sort", {"file_name": "final_report.pdf"})]))
    assert not info["tool_calls"][0]["ok"]  # held back until turn 3
    for _ in range(3):
        observation, _, done, _ = env.step("Done.")
    assert not done and '"name": "sort"' in observation and "I have updated some more functions" in observation


def test_the_package_forgets_each_episodes_instances():
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

    env = BfclEnv()
    env.reset({"dataset": "multi_turn_base", "id": ROW, "parser": "hermes"})
    assert any(k.startswith(env.name) for k in vars(multi_turn_utils))
    name = env.name
    for _ in entries("multi_turn_base")[ROW]["question"]:
        *_, done, _ = env.step("Nothing to do.")
    assert done and not any(k.startswith(name) for k in vars(multi_turn_utils))


def test_held_out_scenarios_are_never_trained_on_in_any_variant():
    categories = "task.categories=[multi_turn_base, multi_turn_miss_param, simple_python]"
    held_pool = {scenario(r) for r in split(read_category("multi_turn_base"), scenario)[1]}
    assert len(held_pool) == 67
    for c in ("multi_turn_miss_func", "multi_turn_long_context", "multi_turn_miss_param"):  # one split for all
        assert {scenario(r) for r in split(read_category(c), scenario)[1]} == held_pool
    for seed in (0, 5):
        cfg = bfcl_config(categories, "task.num_train_rows=600", "task.num_eval_rows=90", f"run.seed={seed}")
        assert cfg.task.env == "relay.envs.bfcl_multi_turn:BfclEnv"
        train, held_out = task_rows(cfg.task, cfg.tools, cfg.run.seed)
        numbers = lambda rows: {  # noqa: E731
            scenario(r["ground_truth"]) for r in rows if r["ground_truth"]["dataset"].startswith("multi_turn")
        }
        assert numbers(held_out) <= held_pool and not numbers(train) & held_pool
        assert len(numbers(train)) == 133 and overlap(train, held_out) is None


def test_a_single_turn_row_in_a_mix_is_one_step_scored_by_the_ast_checker():
    cfg = bfcl_config(
        "task.categories=[multi_turn_base, simple_python]", "task.num_train_rows=4", "task.num_eval_rows=4"
    )
    held_out = task_rows(cfg.task, cfg.tools, cfg.run.seed)[1]
    row = next(r for r in held_out if r["ground_truth"]["dataset"] == "simple_python")
    env = BfclEnv()
    first = env.reset(row["ground_truth"], messages=row["messages"])
    assert env.get_prompt_prefix() == row["messages"][0]["content"] and first == row["messages"][1]["content"]
    [answer] = row["ground_truth"]["answer"]
    [(name, options)] = answer.items()
    right = hermes([(name, {k: v[0] for k, v in options.items() if v and v[0] != ""})])
    assert env.step(right)[1:3] == (1.0, True)
    env.reset(row["ground_truth"], messages=row["messages"])
    assert env.step("I cannot help.")[1:3] == (0.0, True)


def test_one_category_may_be_named_without_a_list():
    cfg = bfcl_config("task.categories=multi_turn_base", "task.num_train_rows=3", "task.num_eval_rows=2")
    assert cfg.task.env == "relay.envs.bfcl_multi_turn:BfclEnv"
    train, held_out = task_rows(cfg.task, cfg.tools, cfg.run.seed)
    assert {r["ground_truth"]["dataset"] for r in train + held_out} == {"multi_turn_base"}


def test_bad_settings_are_one_line_each():
    with pytest.raises(ConfigError) as e:
        bfcl_config("task.categories=[multi_turn_bse]")
    [line] = e.value.problems
    assert line.startswith(
        "task.categories: 'multi_turn_bse' is not a BFCL category relay runs (closest: multi_turn_base"
    )
    with pytest.raises(ConfigError) as e:
        bfcl_config("task.categories=[multi_turn_base]", "task.env=relay.envs.textgame:TextGameEnv")
    assert e.value.problems == [
        "task.env: task.name=bfcl runs its multi-turn categories in its own environment; leave task.env out"
    ]
    with pytest.raises(ConfigError) as e:
        bfcl_config("task.categories=[multi_turn_base]", "tools.enabled=true")
    assert any(p.startswith("tools.enabled: task.name=bfcl's environment runs the calls") for p in e.value.problems)
