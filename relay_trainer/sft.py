"""The supervised stage before RL (sft.*), on the run's own actors: each batch of demonstration
conversations is laid out as token ids by the first rollout worker (its chat template and tool
parser, exactly as its agent loop lays out episodes) and trained on by the learner, with its
own optimizer. The weight sync after it gives RL and the held-out evaluation the tuned weights."""

from __future__ import annotations

from pathlib import Path

from relay.config import ConfigError, TaskConfig, ToolsConfig, resolve_dotted
from relay.config.sft import TASK_DEMONSTRATIONS, SftConfig
from relay.envs import bfcl
from relay.envs.demonstrations import batches, episode_from_messages, read_demonstrations, tool_call_problem
from relay.envs.tool_tasks import TOOL_TASKS
from relay.run.loggers import JsonlLogger
from relay.tools.parsers import get_parser
from relay_trainer.weights import sync_weights


def demonstrations(s: SftConfig, task: TaskConfig, tools: ToolsConfig, train_rows: list[dict]) -> list[list[dict]]:
    """The conversations sft.steps trains on; ConfigError (one line) for a malformed one. Read
    before any actor starts; with tools, each call must parse with the run's tool parser. A task's
    own are written for the first training rows it needs (sft.num_demonstrations of them if set)."""
    parser = get_parser(tools.parser) if tools.enabled else None
    if s.data != TASK_DEMONSTRATIONS:
        try:
            conversations = read_demonstrations(s.data, parser)
        except (OSError, ValueError) as e:
            raise ConfigError([str(e)]) from None
        return conversations[: s.num_demonstrations or None]
    if task.demonstrated_shapes:  # chat_tool: the other shapes are left to reward
        train_rows = [row for row in train_rows if row["shape"] in task.demonstrated_shapes]
    rows = train_rows[: s.steps * s.batch_size]
    own = bfcl if task.name == "bfcl" else TOOL_TASKS.get(task.name)  # a module with demonstrations(rows)
    write = own.demonstrations if own else resolve_dotted(task.env).demonstrations
    conversations = [row["messages"] for row in write(rows)][: s.num_demonstrations or None]
    for n, messages in enumerate(conversations, 1):
        try:
            episode_from_messages(messages)
            if problem := tool_call_problem(messages, parser):
                raise ValueError(problem)
        except ValueError as e:
            raise ConfigError([f"sft.data=task: demonstration {n} of the task: {e}"]) from None
    return conversations


def supervised_stage(
    s: SftConfig, actors, conversations: list[list[dict]], run_dir: Path, seed: int, console_every: int
) -> None:
    """sft.steps supervised steps, logged to run_dir/sft_metrics.jsonl (RL's metrics.jsonl counts
    RL steps alone) and every `console_every` steps to the console, then the weight sync. `seed`
    (run.seed) orders a file's shuffled rows."""
    log = JsonlLogger(run_dir, "sft_metrics.jsonl")
    try:
        for step, batch in enumerate(batches(conversations, s.batch_size, s.steps, seed), 1):
            samples = actors.rollout[0].encode_conversations.remote(batch)
            update = actors.learner.supervised_update.remote(samples)
            metrics = actors.faults.get(update, actors.learner, "supervised update", long=True)
            log.log(metrics, step)
            if step == 1 or step % console_every == 0 or step == s.steps:
                print(f"sft step {step}/{s.steps} | nll {metrics['sft/nll']:.4f}", flush=True)
    finally:
        log.close()
    sync_weights(actors, version=0)
