"""task.*: a built-in task's settings, rows files that exist, and the user's env class and reward
function, which load and whose signatures fit how they will be called."""

from __future__ import annotations

from pathlib import Path

from relay.config.dotted import check_dotted, resolve_dotted
from relay.config.schema import TaskConfig
from relay.config.user_code import check_env_class, check_reward_fn

BUILT_IN_TASKS = ("arithmetic", "chat_arithmetic", "chat_tool")


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
    for key in ("train_file", "eval_file"):
        f = getattr(task, key)
        need(f is None or Path(f).exists(), f"task.{key}: file not found: {f}")
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
