"""sft.*: supervised fine-tuning on demonstration episodes before the first RL step, on the same
learner (its model, micro-batching, rank group and checkpoints), with the held-out evaluation
run before it, after it and after RL. SFT then RL is how a model that never calls a tool is
brought to call it often enough for RL to have something to reinforce.

Demonstrations are chat conversations: the task's own (`sft.data: task`: a built-in tool task's,
or a task.env class's `demonstrations(rows)`) or a JSONL file of `{"messages": [...]}` rows in
the OpenAI layout (system / user / assistant / tool). The loss is the mean negative log-likelihood
of the assistant turns' tokens (with the end-of-turn token where the model writes one); everything
else is context. Each episode is laid out token for token as the agent loop lays out a rollout, so
SFT teaches exactly the tokens RL then samples.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from relay.config.tool_tasks import TOOL_TASK_TOOLS

TASK_DEMONSTRATIONS = "task"


@dataclass(frozen=True)
class SftConfig:
    steps: int = 0  # optimizer steps before RL; 0: no supervised stage
    data: str = TASK_DEMONSTRATIONS  # "task", or a .jsonl file of {"messages": [...]} rows
    batch_size: int = 16  # conversations per optimizer step (a file's rows are shuffled, then cycled)
    lr: float = 1.0e-5  # its own AdamW; RL's optimizer starts fresh after it
    # distinct conversations at most (the first ones; batches cycle over them); 0: as many as the
    # steps use. A small budget is the setting where imitation alone cannot carry the skill.
    num_demonstrations: int = 0


def validate_sft(sft: SftConfig, task_name: str, env_class: type | None) -> list[str]:
    """One line per bad sft.* value; a file's rows are checked line by line where they are read."""
    if sft.steps == 0:
        return []
    p = []
    if sft.steps < 0:
        p.append(f"sft.steps: must be >= 0, got {sft.steps}")
    if sft.batch_size < 1:
        p.append(f"sft.batch_size: must be >= 1, got {sft.batch_size}")
    if sft.num_demonstrations < 0:
        p.append(f"sft.num_demonstrations: must be >= 0 (0: as many as the steps use), got {sft.num_demonstrations}")
    if not sft.lr > 0:
        p.append(f"sft.lr: must be > 0, got {sft.lr}")
    if sft.data == TASK_DEMONSTRATIONS:
        if task_name not in (*TOOL_TASK_TOOLS, "bfcl") and not hasattr(env_class, "demonstrations"):
            p.append(
                "sft.data: 'task' needs a task that writes demonstrations (a built-in tool task such as task.name=chat_tool, or a task.env "
                "class with demonstrations(rows)); give a .jsonl file of {\"messages\": [...]} rows instead"
            )
    elif not Path(sft.data).is_file():
        p.append(f"sft.data: file not found: {sft.data}")
    return p
