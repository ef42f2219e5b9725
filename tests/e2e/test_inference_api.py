"""relay's inference and tool API as users of other PPO setups call it: one engine, multi-turn chat,
episodes with and without tools, the tool registry and the three action parsers, on the tiny model."""

from __future__ import annotations

import pytest

from relay import (
    BatchInferenceManager,
    EnvironmentConfig,
    FunctionCallingParser,
    JSONActionParser,
    MultiTurnInferenceEngine,
    MultiTurnManager,
    ReActActionParser,
    Tool,
    ToolRegistry,
    create_inference_engine,
)
from tests.example_envs import AdditionEnv, TextGameEnv


@pytest.fixture(scope="module")
def engine():
    return create_inference_engine(model_path="tiny", backend="hf", config={"dtype": "float32"})


def test_engine_generate_and_batches(engine):
    output = engine.generate(prompts=["Hello, how are you?"], max_tokens=8, temperature=0.7, top_p=0.9)
    assert isinstance(output.sequences[0], str) and output.tokens.shape[0] == 1 and output.tokens.shape[1] <= 8
    manager = BatchInferenceManager(engine, batch_size=2)
    output = manager.generate_batch(prompts=[f"{i}+{i}=" for i in range(5)], max_tokens=4)
    assert len(output.sequences) == 5 and output.tokens.shape[0] == 5


def test_multi_turn_chat_and_an_episode(engine):
    multi_turn = MultiTurnInferenceEngine(engine=engine, max_turns=5, system_prompt="You are a helpful assistant.")
    multi_turn.start_conversation("Initial prompt")
    response = multi_turn.step(max_tokens=8)
    assert isinstance(response, str) and multi_turn.messages[-1] == {"role": "assistant", "content": response}
    my_env = AdditionEnv()
    responses = multi_turn.run_episode(environment=my_env, initial_prompt="Add.", max_turns=3, max_tokens=8, seed=0)
    # each turn the tiny model ends (EOS) is the environment's action; 23+45 is asked until right or 3 tries.
    # A turn cut at max_tokens is no action: it ends the episode, as in training.
    actions = responses.trajectory.actions
    assert 1 <= len(responses) <= 3 and list(responses)[: len(actions)] == actions
    cut = len(responses) - len(actions)
    assert cut == 0 or (cut == 1 and responses.sample.finish_reason in ("length", "budget"))
    assert responses.trajectory.states[0] == "Add.\n\n23+45" and len(responses.trajectory.rewards) == len(actions)
    assert responses.total_reward == sum(a.strip() == "68" for a in actions)


class Calculator(Tool):
    name = "calculator"
    description = "Add two integers."
    parameters = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    }

    def execute(self, a: int, b: int) -> int:
        return a + b


def test_tool_snippets():
    registry = ToolRegistry()
    registry.register(Calculator())

    @registry.tool
    def shout(text: str) -> str:
        """Upper-case a text.

        Args:
            text: What to shout.
        """
        return text.upper()

    assert registry.execute_tool("calculator", a=2, b=3) == (True, "5")
    assert registry.execute_tool("shout", text="hi") == (True, "HI")
    success, result = registry.execute_tool("calculator", a="two", b=3)
    assert not success and "a" in result
    assert registry.execute_tool("no_such_tool") == (
        False,
        "unknown tool 'no_such_tool'; available tools: 'calculator', 'shout'",
    )
    env = TextGameEnv(EnvironmentConfig())
    outputs = {
        JSONActionParser(): '{"name": "calculator", "arguments": {"a": 2, "b": 3}}',
        ReActActionParser(): 'Thought: add\nAction: calculator\nAction Input: {"a": 2, "b": 3}',
        FunctionCallingParser(): "[calculator(a=2, b=3)]",
    }
    for parser, model_output in outputs.items():
        manager = MultiTurnManager(registry, parser, env)
        turn = manager.step(model_output, env.reset())
        assert turn.tool_call.result == "5" and turn.tool_call.success, type(parser).__name__
    turn = manager.step("take the sword", env.get_state_description())  # no call: the environment's action
    assert turn.tool_call is None and turn.reward == 1.0 and manager.summary()["tool_calls"] == 1


def test_an_episode_with_tools(engine):
    registry = ToolRegistry()
    registry.register(Calculator())
    env = TextGameEnv(EnvironmentConfig())
    manager = MultiTurnManager(registry, JSONActionParser(), env)
    multi_turn = MultiTurnInferenceEngine(engine, tool_manager=manager, enable_tools=True)
    summary = multi_turn.run_episode(env, "Start playing the game.", max_turns=2, max_tokens=4)
    assert 1 <= summary.summary()["turns"] <= 2
