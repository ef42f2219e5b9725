"""task.*: a built-in task's settings, rows files that exist, and the user's env class and reward
function, which load and whose signatures fit how they will be called."""

from __future__ import annotations

from pathlib import Path

from relay.config.dotted import check_dotted, resolve_dotted
from relay.config.reasoning_gym import validate_reasoning_gym
from relay.config.schema import TaskConfig, ToolsConfig
from relay.config.textarena import validate_textarena
from relay.config.tool_tasks import CHAT_TOOL_SHAPES, TOOL_TASK_TOOLS
from relay.config.user_code import check_env_class, check_reward_fn

BUILT_IN_TASKS = ("arithmetic", "chat_arithmetic", *TOOL_TASK_TOOLS, "reasoning_gym", "textarena", "bfcl")


def validate_task(task: TaskConfig) -> list[str]:
    p: list[str] = []

    def need(ok: bool, problem: str) -> None:
        if not ok:
            p.append(problem)

    if task.name == "custom":
        need(
            task.train_file is not None or task.env is not None,
            "task.train_file: required when task.name=custom (or a task.env that makes rows)",
        )
    else:
        need(
            task.name in BUILT_IN_TASKS,
            f"task.name: {task.name!r} is not a built-in task ({', '.join(BUILT_IN_TASKS)}) or 'custom'",
        )
    if task.name == "chat_arithmetic":
        need(bool(task.ops) and set(task.ops) <= set("+-*"), f"task.ops: choose from + - *, got {task.ops!r}")
        need(
            0 <= task.operand_min <= task.operand_max,
            f"task.operand_min, task.operand_max: need 0 <= min <= max, got {task.operand_min}, {task.operand_max}",
        )
        space = len(set(task.ops)) * (task.operand_max - task.operand_min + 1) ** 2
        need(
            task.num_eval_rows < space,
            f"task.num_eval_rows: {task.num_eval_rows} held-out problems leave none to train on ({space} in all)",
        )
    need(
        not task.worked_example or task.name == "tool_chain",
        f"task.worked_example: only the tool_chain task has one, not {task.name!r}",
    )
    need(
        0 <= task.nudge <= 1 and (not task.nudge or task.name == "tool_chain"),
        f"task.nudge: a share in [0, 1] for the tool_chain task, got {task.nudge} for {task.name!r}",
    )
    unknown = [name for name in task.demonstrated_shapes if name not in CHAT_TOOL_SHAPES]
    need(
        not task.demonstrated_shapes or (task.name == "chat_tool" and not unknown),
        f"task.demonstrated_shapes: chat_tool's shapes, from {', '.join(CHAT_TOOL_SHAPES)}; "
        f"got {task.demonstrated_shapes} for {task.name!r}",
    )
    for key in ("train_file", "eval_file"):
        f = getattr(task, key)
        need(f is None or Path(f).exists(), f"task.{key}: file not found: {f}")
    p += validate_reasoning_gym(task)
    p += validate_textarena(task)
    need(1 <= task.digits <= 9, f"task.digits: must be in [1, 9], got {task.digits}")
    p += validate_user_code(task)
    need(
        task.success_threshold == task.success_threshold and abs(task.success_threshold) != float("inf"),
        f"task.success_threshold: must be a finite number, got {task.success_threshold}",
    )
    return p


def validate_user_code(task: TaskConfig) -> list[str]:
    """task.env and task.reward_fn: they load, and their signatures fit how they will be called."""
    p = []
    for key, dotted, check in (("env", task.env, check_env_class), ("reward_fn", task.reward_fn_path, check_reward_fn)):
        if dotted is None:
            continue
        err = check_dotted(dotted)
        if err is None:
            err = check(resolve_dotted(dotted))
        if err is not None:
            p.append(f"task.{key}: {err}")
    return p


def validate_tool_task(task: TaskConfig, tools: ToolsConfig) -> list[str]:
    """A built-in tool task runs only with every tool its episodes call: tools.enabled (the
    sandboxed python tool), and each function tool named by a tools.functions entry."""
    needed = TOOL_TASK_TOOLS.get(task.name)
    if not needed or task.agent:  # an agent program (task.agent) runs its tools itself
        return []
    if not tools.enabled:
        return [f"tools.enabled: task.name={task.name} calls the tools {', '.join(needed)}; set tools.enabled=true"]
    provided = {"python"}
    for dotted in tools.functions:
        if check_dotted(dotted) is None:  # a bad entry is named by the tools.* checks
            fn = resolve_dotted(dotted)
            provided.add(getattr(fn, "name", None) or getattr(fn, "__name__", ""))
    return [
        f"tools.functions: task.name={task.name} calls the tool {name!r}, which no entry provides "
        f"(add relay.envs.keyed_values:{name})"
        for name in needed
        if name not in provided
    ]
