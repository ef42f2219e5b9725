"""Tools as objects, and tool calls one model output at a time.

    class Calculator(Tool):
        name = "calculator"
        description = "Evaluate an arithmetic expression."
        parameters = {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}

        def execute(self, expression: str) -> str:
            return str(eval_arithmetic(expression))

    registry = ToolRegistry(); registry.register(Calculator())       # or @registry.tool on a typed function
    success, result = registry.execute_tool("calculator", expression="2+3")
    manager = MultiTurnManager(registry, JSONActionParser(), env)
    turn = manager.step('{"name": "calculator", "arguments": {"expression": "2+3"}}', env.reset())
    turn.tool_call.result   # "5"

The registry is relay's (relay/tools/registry.py): arguments are checked against the tool's
`parameters` schema before execute() runs, and every failure comes back as data. The parsers are
relay's (relay/tools/parsers.py), the ones its agent loop trains with.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from relay.tools.calls import ToolParser
from relay.tools.parsers import JsonParser, PythonicParser, ReActParser, get_parser
from relay.tools.registry import ToolRegistry, ToolResult, _to_text

JSONActionParser = JsonParser  # {"name": "f", "arguments": {...}}
ReActActionParser = ReActParser  # Thought: / Action: f / Action Input: {...}
FunctionCallingParser = PythonicParser  # [f(a=1, b="x")]

__all__ = [
    "FunctionCallingParser",
    "JSONActionParser",
    "MultiTurnManager",
    "ReActActionParser",
    "Tool",
    "ToolCallRecord",
    "ToolRegistry",
    "Turn",
]


class Tool:
    """A tool written as a class: name, description, parameters (a JSON schema of the arguments)
    and execute(**arguments). Subclass it and register an instance with a ToolRegistry."""

    name: str = ""
    description: str = ""
    parameters: dict[str, Any] = {"type": "object", "properties": {}}

    def execute(self, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.execute(**arguments) -> the tool's result")

    def schema(self) -> dict:
        """The OpenAI function schema relay's registry and chat templates read."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": dict(self.parameters)},
        }

    def invoke(self, arguments: dict[str, Any]) -> ToolResult:
        t0 = time.monotonic()
        try:
            value = self.execute(**arguments)
        except Exception as e:  # the tool failed on this input: data for the model
            return ToolResult(False, "", f"tool {self.name!r} raised {type(e).__name__}: {e}", time.monotonic() - t0)
        return ToolResult(True, _to_text(value), None, time.monotonic() - t0)


@dataclass
class ToolCallRecord:
    name: str
    arguments: dict[str, Any]
    success: bool
    result: str  # the tool's output, or the error line when it failed


@dataclass
class Turn:
    """One model output handled by MultiTurnManager.step."""

    model_output: str
    state: Any  # the state (observation) the model answered
    tool_call: ToolCallRecord | None = None  # the first call in the output, if any
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    parse_errors: list[str] = field(default_factory=list)  # malformed calls, worded for the model
    observation: str = ""  # what the model reads next: tool results (or errors), else the environment's answer
    reward: float = 0.0
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)


class MultiTurnManager:
    """Model outputs -> tool calls -> results. An output with a tool call runs it through the
    registry; an output without one is the environment's action (when there is an environment)."""

    def __init__(self, registry: ToolRegistry, parser: ToolParser | str = "json", environment: Any = None):
        self.registry = registry
        self.parser = get_parser(parser) if isinstance(parser, str) else parser
        self.environment = environment
        self.turns: list[Turn] = []

    def step(self, model_output: str, state: Any = None) -> Turn:
        parsed = self.parser.parse(model_output)
        turn = Turn(model_output=model_output, state=state, parse_errors=list(parsed.errors))
        observations = list(parsed.errors)
        for call in parsed.calls:
            result = self.registry.call(call)
            record = ToolCallRecord(call.name, call.arguments, result.ok, result.output if result.ok else result.error)
            turn.tool_calls.append(record)
            observations.append(self.parser.format_result(call, result.observation()))
        turn.tool_call = turn.tool_calls[0] if turn.tool_calls else None
        if not parsed and self.environment is not None:
            observation, reward, done, info = self.environment.step(model_output)
            turn.observation, turn.reward, turn.done, turn.info = (
                str(observation),
                float(reward),
                bool(done),
                info or {},
            )
        else:
            turn.observation = "\n".join(observations)
        self.turns.append(turn)
        return turn

    def reset(self) -> None:
        self.turns = []

    def summary(self) -> dict[str, Any]:
        """The episode so far: turns, tool calls and their failures, environment reward."""
        calls = [c for t in self.turns for c in t.tool_calls]
        return {
            "turns": len(self.turns),
            "tool_calls": len(calls),
            "tool_errors": sum(not c.success for c in calls) + sum(len(t.parse_errors) for t in self.turns),
            "tools_used": sorted({c.name for c in calls}),
            "total_reward": sum(t.reward for t in self.turns),
            "done": bool(self.turns and self.turns[-1].done),
        }
