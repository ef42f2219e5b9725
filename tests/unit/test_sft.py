"""The supervised stage (sft.*): demonstrations laid out token for token as the agent loop lays out
the same episode, bad rows named by file and line, the NLL step, and the chat_tool task's rows."""

import json
from types import SimpleNamespace

import pytest
import torch

from relay.agent.loop import AgentLimits, AgentLoop
from relay.config import ConfigError, load_config
from relay.engines.base import SamplingParams
from relay.envs import chat_tool
from relay.envs.chat import ChatFormat
from relay.envs.chat_arithmetic import chat_arithmetic_reward
from relay.envs.demonstrations import batches, episode_from_messages, read_demonstrations, supervised_sample
from relay.models.tokenizer import build_tiny_tokenizer
from relay.tools.parsers import get_parser
from relay.types import Batch
from tests.agent_scripts import EOS, ScriptedEngine, calculator

CALL = '<tool_call>\n{"name": "python", "arguments": {"code": "print(6*7)"}}\n</tool_call>'


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer()


def test_a_demonstration_is_the_episode_the_agent_loop_would_record(tok):
    """Same prompt ids, response ids and loss mask as a rollout that wrote the assistant turns."""
    engine = ScriptedEngine(tok, lambda turn, text: [CALL + EOS, "42" + EOS][min(turn, 1)])
    hermes = get_parser("hermes")
    loop = AgentLoop(engine, tok, AgentLimits(max_tokens_per_turn=80), parser=hermes, run_tools=calculator)
    [rolled] = loop.run([{"prompt": "6*7?"}], SamplingParams(seed=0), n=1)
    conversation = [
        {"role": "user", "content": "6*7?"},
        {"role": "assistant", "content": CALL},
        {"role": "tool", "content": "42"},
        {"role": "assistant", "content": "42"},
    ]
    demo = supervised_sample(ChatFormat(tok), conversation, hermes.stop_strings)
    assert demo.prompt_ids == rolled.prompt_ids
    assert demo.response_ids == rolled.response_ids
    assert demo.loss_mask == rolled.loss_mask
    # without the parser's stop strings the call's turn closes with the model's own EOS (mask 1)
    closed = supervised_sample(ChatFormat(tok), conversation)
    assert closed.response_ids == rolled.response_ids and sum(closed.loss_mask) == sum(rolled.loss_mask) + 1


@pytest.mark.parametrize(
    ("messages", "problem"),
    [
        ([{"role": "user", "content": "hi"}], "no assistant message"),
        ([{"role": "assistant", "content": "7"}], "a prompt must come before it"),
        (
            [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "tool", "content": "c"}],
            "end with the assistant's",
        ),
        (
            [{"role": "user", "content": "a"}, {"role": "assistant", "tool_calls": []}],
            "message 2 needs a string role and string content",
        ),
        ("not a list", '"messages" must be a list'),
    ],
)
def test_malformed_conversations_are_named(messages, problem):
    with pytest.raises(ValueError, match=problem):
        episode_from_messages(messages)


def test_a_bad_file_row_names_the_file_and_line(tmp_path):
    good = {"messages": [{"role": "user", "content": "1+1="}, {"role": "assistant", "content": "2"}]}
    path = tmp_path / "demos.jsonl"
    path.write_text(json.dumps(good) + "\n\n" + "{not json\n")
    with pytest.raises(ValueError, match=rf"sft.data: {path}:3: "):
        read_demonstrations(path)
    path.write_text(json.dumps(good) + "\n" + json.dumps({"prompt": "x"}) + "\n")
    with pytest.raises(ValueError, match=rf"{path}:2: a row must be an object with \"messages\""):
        read_demonstrations(path)
    path.write_text(json.dumps(good) + "\n")
    assert read_demonstrations(path) == [good["messages"]]


def test_batches_cycle_through_every_conversation_before_repeating_one():
    convs = [[{"n": i}] for i in range(5)]
    out = batches(convs, 2, 5, seed=0)
    assert [len(b) for b in out] == [2] * 5
    flat = [c[0]["n"] for b in out for c in b]
    assert sorted(flat[:5]) == list(range(5)) and sorted(flat[5:]) == list(range(5))


def test_config_checks_name_the_key(tmp_path):
    with pytest.raises(ConfigError, match="sft.lr: must be > 0"):
        load_config(None, ["sft.steps=2", "sft.lr=0"])
    with pytest.raises(ConfigError, match="sft.data: file not found: nowhere.jsonl"):
        load_config(None, ["sft.steps=2", "sft.data=nowhere.jsonl"])
    with pytest.raises(ConfigError, match="sft.data: 'task' needs a task that writes demonstrations"):
        load_config(None, ["sft.steps=2"])  # the built-in arithmetic task writes none
    assert load_config(None, ["task.name=chat_tool", "tools.enabled=true", "sft.steps=2"]).sft.steps == 2


def test_the_nll_step_lowers_the_loss_on_its_batch(tok, tiny_model_path):
    from relay.models.loading import load_model
    from relay.update.supervised import supervised_step

    torch.manual_seed(0)
    model = load_model(tiny_model_path)
    fmt = ChatFormat(tok)
    samples = [
        supervised_sample(fmt, [{"role": "user", "content": f"{a}+{a}="}, {"role": "assistant", "content": str(2 * a)}])
        for a in range(10, 18)
    ]
    batch = Batch.from_samples(samples, pad_id=tok.pad_token_id)
    training = load_config(None, ["training.micro_batch_size=3"]).training  # three micro-batches
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    first = supervised_step(model, optimizer, batch, training)
    for _ in range(5):
        last = supervised_step(model, optimizer, batch, training)
    assert first["sft/tokens"] == sum(sum(s.loss_mask) for s in samples)
    assert last["sft/nll"] < 0.8 * first["sft/nll"] and first["sft/optimizer_steps"] == 1


def test_chat_tool_held_out_problems_are_never_trained_on_and_demonstrations_earn_the_reward():
    train, held_out = chat_tool.make_rows(3000, 200, seed=0)
    question = lambda row: row["messages"][-1]["content"]  # noqa: E731
    assert len({question(r) for r in held_out}) == 200
    assert not {question(r) for r in train} & {question(r) for r in held_out}
    assert chat_tool.make_rows(10, 200, seed=0) == (train[:10], held_out)
    assert all(r["messages"][0]["content"] == chat_tool.SYSTEM for r in train[:10])
    for row, demo in zip(train[:50], chat_tool.demonstrations(train[:50])):
        call = json.loads(demo["messages"][2]["content"].removeprefix("<tool_call>").removesuffix("</tool_call>"))
        assert eval(call["arguments"]["code"].removeprefix("print")) == int(row["ground_truth"])
        final = SimpleNamespace(final_text=demo["messages"][-1]["content"], ground_truth=row["ground_truth"])
        assert chat_arithmetic_reward(final) == 1.0


def test_a_tasks_demonstrations_answer_its_first_training_rows_up_to_the_budget():
    """sft.data=task: written for the first sft.steps * sft.batch_size training rows, the first
    sft.num_demonstrations of them kept, each of its tool calls parsed with the run's tool parser."""
    from relay.run.rows import task_rows
    from relay_trainer.sft import demonstrations

    tools = ["task.name=chat_tool", "tools.enabled=true", "tools.parser=hermes"]
    cfg = load_config(None, [*tools, "sft.steps=2", "sft.batch_size=3", "sft.num_demonstrations=4"])
    train, _ = task_rows(cfg.task, cfg.tools, cfg.run.seed)
    conversations = demonstrations(cfg.sft, cfg.task, cfg.tools, train)
    question = lambda messages: next(m["content"] for m in messages if m["role"] == "user")  # noqa: E731
    assert [question(c) for c in conversations] == [question(row["messages"]) for row in train[:4]]
    assert all(CALL.split("print")[0] in c[2]["content"] for c in conversations)  # a hermes call


def test_demonstrated_shapes_keep_chat_tool_demonstrations_to_those_shapes_and_name_a_wrong_one():
    """task.demonstrated_shapes: the demonstrations ask those shapes only, the first training rows of
    them, while RL's training rows keep every shape; a name chat_tool lacks, or demonstrations read
    from a file, stop in one line."""
    from relay.config.tool_tasks import CHAT_TOOL_SHAPES
    from relay.run.rows import task_rows
    from relay_trainer.sft import demonstrations

    assert tuple(chat_tool.SHAPES) == CHAT_TOOL_SHAPES
    tools = ["task.name=chat_tool", "tools.enabled=true", "tools.parser=hermes", "sft.steps=2", "sft.batch_size=3"]
    cfg = load_config(None, [*tools, "task.demonstrated_shapes=[product]"])
    train, _ = task_rows(cfg.task, cfg.tools, cfg.run.seed)
    assert {row["shape"] for row in train[:100]} == set(CHAT_TOOL_SHAPES)
    products = [row for row in train if row["shape"] == "product"][:6]
    question = lambda messages: next(m["content"] for m in messages if m["role"] == "user")  # noqa: E731
    conversations = demonstrations(cfg.sft, cfg.task, cfg.tools, train)
    assert [question(c) for c in conversations] == [question(row["messages"]) for row in products]
    assert all(" * " in q and "+" not in q and "-" not in q for q in map(question, conversations))
    with pytest.raises(ConfigError, match=r"task.demonstrated_shapes: .*got \['square'\]"):
        load_config(None, [*tools, "task.demonstrated_shapes=[square]"])
    with pytest.raises(ConfigError, match="task.demonstrated_shapes: .* for 'tool_retry'"):
        load_config(None, ["task.name=tool_retry", "task.demonstrated_shapes=[product]"])
    with pytest.raises(ConfigError, match="task.demonstrated_shapes: .* got sft.steps=2, sft.data=demos.jsonl"):
        load_config(None, [*tools, "task.demonstrated_shapes=[product]", "sft.data=demos.jsonl"])
