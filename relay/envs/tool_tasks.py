"""The built-in tool tasks by name (task.name): each module makes its disjoint training and
held-out rows (`make_rows(num_train, num_eval, seed)`), writes demonstrations for the supervised
stage (`demonstrations(rows)`). The tools each one's episodes call are config data
(relay.config.schema.TOOL_TASK_TOOLS), checked against tools.* before any actor starts. Their
reward is `tool_answer_reward`."""

from __future__ import annotations

from types import ModuleType

from relay.envs import chat_tool, tool_chain, tool_retry
from relay.envs.chat_arithmetic import chat_arithmetic_reward
from relay.types import FinishReason

TOOL_TASKS: dict[str, ModuleType] = {"chat_tool": chat_tool, "tool_chain": tool_chain, "tool_retry": tool_retry}


def tool_answer_reward(sample, env=None) -> float:
    """1 when the episode ends with an answer turn whose last integer is the answer, 0 otherwise.
    An episode cut at its turn or token budget gave no answer, whatever its last turn holds: read
    as an answer, a cut `print(7140)` call scored, and a policy learnt to call on until the budget."""
    return chat_arithmetic_reward(sample) if sample.finish_reason == FinishReason.STOP else 0.0


def question(row: dict) -> str:
    """What a row asks, as one string: its prompt, or its messages' contents."""
    if "messages" in row:
        return "\n".join(str(m.get("content", "")) for m in row["messages"])
    return str(row.get("prompt", ""))


def overlap(train: list[dict], held_out: list[dict]) -> tuple[int, int] | None:
    """(held-out row, training row), both 1-based, of the first held-out question that is also a
    training question; None when the two share none."""
    first_in_train: dict[str, int] = {}
    for i, row in enumerate(train, 1):
        first_in_train.setdefault(question(row), i)
    for j, row in enumerate(held_out, 1):
        if (i := first_in_train.get(question(row))) is not None:
            return j, i
    return None
