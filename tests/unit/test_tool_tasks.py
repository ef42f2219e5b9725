"""The built-in tool tasks (chat_tool, tool_chain, tool_retry): held-out problems that share no
question (and, for the lookup tasks, no key) with training; demonstrations that are single-call
episodes earning the reward; the lookup tool's errors that name the right key; and the bad input
that stops a run before any actor starts, in one line."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from relay.agent.loop import AgentLimits, AgentLoop
from relay.config import ConfigError, load_config
from relay.engines.base import SamplingParams
from relay.envs import keyed_values, math_tool, tool_chain, tool_retry
from relay.envs.demonstrations import read_demonstrations, tool_call_problem
from relay.envs.tool_tasks import TOOL_TASKS, overlap, question, tool_answer_reward
from relay.models.tokenizer import build_tiny_tokenizer
from relay.run.rows import checked_split, task_rows
from relay.tools.calls import ToolCall
from relay.tools.parsers import get_parser
from relay.tools.registry import ToolRegistry
from relay.types import FinishReason
from tests.agent_scripts import EOS, ScriptedEngine

HERMES = get_parser("hermes")


@pytest.mark.parametrize("name", sorted(TOOL_TASKS))
@pytest.mark.parametrize("seed", [0, 5])
def test_held_out_problems_are_at_least_128_and_never_trained_on(name, seed):
    train, held_out = TOOL_TASKS[name].make_rows(3000, 128, seed)
    assert len(held_out) == 128 and len({question(r) for r in held_out}) == 128
    assert overlap(train, held_out) is None
    assert not {question(r) for r in train} & {question(r) for r in held_out}
    if name != "chat_tool":  # nor is a held-out key's stored number ever seen in training
        assert not {r["key"] for r in train} & {r["key"] for r in held_out}
    assert TOOL_TASKS[name].make_rows(10, 128, seed) == (train[:10], held_out)


def test_math_tool_holds_out_the_same_128_products_for_every_seed_and_never_trains_on_them():
    held_out = math_tool.make_eval_rows(128, seed=0)
    assert len({r["prompt"] for r in held_out}) == 128 and held_out == math_tool.make_eval_rows(128, seed=3)
    for seed in (0, 3):
        train = math_tool.make_rows(5000, seed)
        assert overlap(train, held_out) is None
        warm = math_tool.MathToolEnv.warm_start_episodes(2000, seed)
        assert not {e.prompt[0]["content"] for e in warm} & {r["prompt"] for r in held_out}
    with pytest.raises(ValueError, match="math_tool holds out 128 problems, got 200"):
        math_tool.make_eval_rows(200, seed=0)


def test_lookup_reads_the_table_and_names_the_key_a_sloppy_spelling_meant():
    registry = ToolRegistry([keyed_values.lookup])
    ok = registry.call(ToolCall("lookup", {"key": "QX4"}))
    assert ok.ok and ok.output == str(keyed_values.value("QX4")) and 100 <= keyed_values.value("QX4") <= 999
    for sloppy in ("qx4", "QX-4", "qx 4"):
        failed = registry.call(ToolCall("lookup", {"key": sloppy}))
        assert not failed.ok and "did you mean 'QX4'?" in failed.error
    assert "did you mean" not in registry.call(ToolCall("lookup", {"key": "banana"})).error


def calls_of(conversation: dict) -> list[ToolCall]:
    return [c for m in conversation["messages"] if m["role"] == "assistant" for c in HERMES.parse(m["content"]).calls]


def answer_earns_reward(conversation: dict, truth: str) -> bool:
    final = conversation["messages"][-1]["content"]
    sample = SimpleNamespace(final_text=final, ground_truth=truth, finish_reason=FinishReason.STOP)
    return tool_answer_reward(sample) == 1.0


def test_chain_demonstrations_are_single_calls_and_the_chained_episode_is_the_only_way_to_score():
    train, _ = tool_chain.make_rows(40, 128, seed=0)
    demos = tool_chain.demonstrations(train)
    assert len(demos) == 2 * len(train)
    registry = ToolRegistry([keyed_values.lookup])
    for row, (lookup_demo, compute_demo) in zip(train, zip(demos[::2], demos[1::2])):
        [lookup], [compute] = calls_of(lookup_demo), calls_of(compute_demo)
        assert lookup.name == "lookup" and compute.name == "python"
        x = registry.call(lookup).output
        assert answer_earns_reward(lookup_demo, x)
        assert eval(compute.arguments["code"].removeprefix("print")) == int(row["ground_truth"])
        assert answer_earns_reward(compute_demo, row["ground_truth"])
        assert f"x * {row['b']}" in row["messages"][-1]["content"] and x not in question(row)
        assert all(tool_call_problem(d["messages"], HERMES) is None for d in (lookup_demo, compute_demo))


def test_a_tool_task_scores_an_answer_turn_and_never_an_episode_cut_at_its_budget():
    row = tool_chain.make_rows(1, 128, seed=0)[0][0]
    truth, tok, registry = row["ground_truth"], build_tiny_tokenizer(), ToolRegistry([keyed_values.lookup])
    lookup = keyed_values.tool_call("lookup", {"key": row["key"]})
    repeat = keyed_values.tool_call("python", {"code": f"print({truth})"})  # the answer, inside a call

    def episode(last_turn: str, max_turns: int = 3, max_total_tokens: int = 2000):
        script = lambda turn, text: (lookup if turn == 0 else last_turn) + EOS  # noqa: E731
        limits = AgentLimits(max_turns=max_turns, max_tokens_per_turn=200, max_total_tokens=max_total_tokens)
        loop = AgentLoop(
            ScriptedEngine(tok, script), tok, limits, parser=HERMES, run_tools=lambda b: [registry.call(c) for c in b]
        )
        [sample] = loop.run([{k: v for k, v in row.items() if k != "messages"} | {"prompt": "?"}], SamplingParams())
        return sample.finish_reason, tool_answer_reward(sample)

    assert episode(truth, max_turns=2) == (FinishReason.STOP, 1.0)
    assert episode(str(int(truth) + 1), max_turns=2) == (FinishReason.STOP, 0.0)
    assert episode(repeat) == (FinishReason.MAX_TURNS, 0.0)
    assert episode(repeat, max_total_tokens=200)[1] == 0.0  # cut inside the call
    cfg = load_config(Path(__file__).parents[2] / "configs/smol_tool_chain.yaml", [])
    assert cfg.task.reward_fn_path == "relay.envs.tool_tasks:tool_answer_reward"


def test_the_worked_example_is_one_whole_two_call_episode_whose_key_no_row_asks():
    train, held_out = tool_chain.make_rows(2000, 128, seed=0, worked_example=True)
    system = train[0]["messages"][0]["content"]
    assert system.startswith(tool_chain.SYSTEM) and system.count("<tool_call>") == 3  # the format, then two calls
    assert system.endswith(f"assistant: {keyed_values.value('AB1') * 12}")
    assert "AB1" not in {r["key"] for r in train + held_out} and overlap(train, held_out) is None
    assert tool_chain.make_rows(50, 128, seed=0)[1][0]["messages"][0]["content"] == tool_chain.SYSTEM
    with pytest.raises(ConfigError, match="task.worked_example: only the tool_chain task has one, not 'tool_retry'"):
        load_config(
            None,
            [
                "task.name=tool_retry",
                "task.worked_example=true",
                "tools.enabled=true",
                "tools.functions=[relay.envs.keyed_values:lookup]",
            ],
        )


def test_a_nudge_names_the_next_step_in_its_share_of_a_training_group_and_is_trained_on_bare():
    train, held_out = tool_chain.make_rows(50, 128, seed=0, nudge=0.25)
    assert all(r["nudge"]["share"] == 0.25 for r in train) and not any("nudge" in r for r in held_out)
    tok, registry = build_tiny_tokenizer(), ToolRegistry([keyed_values.lookup])
    calls = [keyed_values.tool_call("lookup", {"key": "?"}), keyed_values.tool_call("python", {}), "done"]

    def episodes(row: dict) -> tuple[list[str], list]:
        """8 episodes that call lookup on the row's key, then python (an unknown tool here), then answer:
        the lookup reply each one read, and the Samples."""
        script = lambda turn, text: calls[turn].replace("?", row["key"]) + EOS  # noqa: E731
        engine = ScriptedEngine(tok, script)
        limits = AgentLimits(max_tokens_per_turn=200, max_total_tokens=2000)
        loop = AgentLoop(engine, tok, limits, parser=HERMES, run_tools=lambda batch: [registry.call(c) for c in batch])
        samples = loop.run([{k: v for k, v in row.items() if k != "messages"} | {"prompt": "?"}], SamplingParams(), n=8)
        second_turn_prompts = [
            tok.decode(p) for p, out, _ in engine.outputs if tok.decode(out).startswith(calls[1][:25])
        ]
        return second_turn_prompts, samples

    x, key = keyed_values.value(train[0]["key"]), train[0]["key"]
    nudge = f"{key} holds {x}. Now compute {x} * {train[0]['b']} with python."
    read, samples = episodes(train[0])
    assert [nudge in r for r in read] == [True, True] + [False] * 6  # a quarter of the group
    assert all(r.endswith(f"tool\n{x}<|im_end|>\n<|im_start|>assistant\n") for r in read[2:])
    for s in samples:  # every Sample holds the bare reply: the context a held-out episode shows
        text = tok.decode(s.response_ids)
        assert "holds" not in text and f"tool\n{x}<|im_end|>" in text and s.final_text == "done"
        turns = [tok.decode(s.response_ids[a:b]) for a, b in s.turn_spans]
        assert turns == [calls[0].replace("?", key), calls[1], "done<|im_end|>"]
        assert (
            sum(s.loss_mask)
            == sum(b - a for a, b in s.turn_spans)
            == len(s.rollout_logprobs) - s.rollout_logprobs.count(0.0)
        )
    assert samples[0].response_ids == samples[7].response_ids
    read, _ = episodes(held_out[0])
    assert not any("holds" in r for r in read)
    with pytest.raises(
        ConfigError, match=r"task.nudge: a share in \[0, 1\] for the tool_chain task, got 0.5 for 'tool_retry'"
    ):
        load_config(
            None,
            [
                "task.name=tool_retry",
                "task.nudge=0.5",
                "tools.enabled=true",
                "tools.functions=[relay.envs.keyed_values:lookup]",
            ],
        )


def test_retry_questions_are_half_sloppy_and_demonstrations_show_only_well_written_keys():
    train, held_out = tool_retry.make_rows(400, 128, seed=0)
    for rows in (train, held_out):
        sloppy = sum(r["shown"] != r["key"] for r in rows) / len(rows)
        assert 0.35 < sloppy < 0.65
    registry = ToolRegistry([keyed_values.lookup])
    for row, demo in zip(train, tool_retry.demonstrations(train)):
        [call] = calls_of(demo)
        assert call.arguments == {"key": row["key"]} and registry.call(call).output == row["ground_truth"]
        assert answer_earns_reward(demo, row["ground_truth"])
        first = registry.call(ToolCall("lookup", {"key": row["shown"]}))
        assert first.ok == (row["shown"] == row["key"])  # a sloppy key fails, and the error names the key
        assert first.ok or f"did you mean {row['key']!r}?" in first.error


@pytest.mark.parametrize("name", ["tool_chain", "tool_retry"])
def test_a_lookup_task_without_its_tool_stops_in_one_line(name):
    with pytest.raises(ConfigError) as missing:
        load_config(None, [f"task.name={name}", "tools.enabled=true"])
    assert missing.value.problems == [
        f"tools.functions: task.name={name} calls the tool 'lookup', which no entry provides "
        "(add relay.envs.keyed_values:lookup)"
    ]
    with pytest.raises(ConfigError, match=f"tools.enabled: task.name={name} calls the tools"):
        load_config(None, [f"task.name={name}"])
    load_config(None, [f"task.name={name}", "tools.enabled=true", "tools.functions=[relay.envs.keyed_values:lookup]"])


def test_a_held_out_set_that_overlaps_training_is_refused_naming_the_rows(tmp_path):
    rows = [{"prompt": f"What is {i} + 1?", "ground_truth": str(i + 1)} for i in range(5)]
    with pytest.raises(ConfigError, match=r"task.eval_file: held-out row 2 asks the same question as training row 4"):
        checked_split(rows, [{"prompt": "new?", "ground_truth": "0"}, rows[3]], "task.eval_file")
    train, evals = tmp_path / "train.jsonl", tmp_path / "eval.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    evals.write_text(json.dumps(rows[0]) + "\n")
    cfg = load_config(None, ["task.name=custom", f"task.train_file={train}", f"task.eval_file={evals}"])
    with pytest.raises(ConfigError, match="held-out row 1 asks the same question as training row 1"):
        task_rows(cfg.task, cfg.tools, cfg.run.seed)


def test_a_demonstration_whose_tool_call_does_not_parse_is_named_by_file_and_line(tmp_path):
    good = tool_retry.demonstrations(tool_retry.make_rows(1, 128, 0)[0])[0]["messages"]
    broken = [dict(m) for m in good]
    broken[2]["content"] = '<tool_call>\n{"name": "lookup", "arguments": {"key": "AB1"</tool_call>'
    path = tmp_path / "demos.jsonl"
    path.write_text(json.dumps({"messages": good}) + "\n" + json.dumps({"messages": broken}) + "\n")
    assert len(read_demonstrations(path)) == 2  # no parser: nothing to check calls against
    with pytest.raises(
        ValueError,
        match=rf"sft.data: {path}:2: assistant message 1: its tool call does not parse with tools.parser=hermes",
    ):
        read_demonstrations(path, HERMES)
