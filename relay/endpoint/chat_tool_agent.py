"""The built-in tool recipe (configs/smol_tool.yaml) as an agent program (configs/smol_tool_agent.yaml).

The chat_tool task (relay/envs/chat_tool.py) written against the `openai` client: ask the row's
question with the python tool offered, run each call the model makes in relay's sandbox, send the
output back as a tool message, ask again; the reward is 1 when the last integer of the final answer
is exact. The row's system message already shows the tool's schema in the hermes layout, since
SmolLM2's chat template does not render `tools=`; `tools=` is still sent, so that the endpoint
reads the model's <tool_call> text into `tool_calls` (the prompt's tokens are the same either way:
tests/unit/test_chat_tool_agent.py).
"""

from __future__ import annotations

import functools
import json

import openai

from relay.envs.chat_arithmetic import final_integer
from relay.envs.chat_tool import PYTHON_SCHEMA
from relay.tools.calls import ToolCall
from relay.tools.registry import PythonTool, ToolRegistry
from relay.tools.sandbox import SandboxConfig

TOOLS = [{"type": "function", "function": PYTHON_SCHEMA}]
MAX_TURNS = 3  # the recipe's rollout.max_turns: calls of the first two turns run, the third answers
# the recipe's tools.sandbox_limits: the agent, not the config, owns its tool
LIMITS = SandboxConfig(wall_timeout_s=5.0, cpu_seconds=2, memory_mb=256, max_output_bytes=1024)


@functools.cache
def python_tool() -> ToolRegistry:
    """The sandboxed python tool, built on first use in the process running the episodes. It refuses
    (SandboxUnavailable) where bubblewrap cannot run: the model's code is hostile and never runs outside it."""
    return ToolRegistry([PythonTool.sandboxed(LIMITS, "bwrap")])


def tool_message(call) -> dict:
    """The tool's output for one call; a malformed call gets an error line, as the environment version's."""
    try:
        arguments = json.loads(call.function.arguments)
    except json.JSONDecodeError as e:
        output = f"Error: tool {call.function.name!r}: the arguments are not JSON ({e})"
    else:  # the registry checks the name and arguments against the schema, then runs the code
        output = python_tool().call(ToolCall(call.function.name, arguments)).observation()
    return {"role": "tool", "tool_call_id": call.id, "name": call.function.name, "content": output}


def run(client, row: dict) -> float:
    messages, answer = list(row["messages"]), ""
    for turn in range(MAX_TURNS):
        try:
            reply = client.chat.completions.create(model="policy", messages=messages, tools=TOOLS)
        except openai.BadRequestError as e:
            if e.code != "context_length_exceeded":
                raise
            break  # the episode's response tokens are spent (rollout.max_total_tokens): the last answer stands
        message = reply.choices[0].message
        answer = message.content or ""
        if not message.tool_calls or turn == MAX_TURNS - 1:
            break
        messages += [message, *(tool_message(call) for call in message.tool_calls)]
    return float(final_integer(answer) == row["ground_truth"])
