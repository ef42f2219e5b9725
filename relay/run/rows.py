"""A run's training and held-out rows, from the task's config; held-out rows never ask a training
question (pure: no ray)."""

from __future__ import annotations

from relay.config import ConfigError, TaskConfig, ToolsConfig, resolve_dotted
from relay.envs import bfcl_rows, chat_arithmetic, reasoning_gym, textarena
from relay.envs.arithmetic import make_rows
from relay.envs.contract import seed_rows
from relay.envs.data import load_rows
from relay.envs.tool_tasks import TOOL_TASKS, overlap


def task_rows(t: TaskConfig, tools: ToolsConfig, seed: int) -> tuple[list[dict], list[dict]]:
    """(training rows, held-out rows) of task `t`, drawn with `seed` (run.seed); bfcl's rows show
    calls in the syntax of tools.parser. ConfigError (one line) for a held-out row asked in training."""
    if t.name == "arithmetic":
        # Distinct seeds: held-out rows are (almost surely) not training rows.
        return make_rows(t.num_train_rows, seed, t.digits), make_rows(t.num_eval_rows, seed + 7_919, t.digits)
    if t.name == "chat_arithmetic":  # held-out problems are never among the training rows
        ops = "".join(dict.fromkeys(t.ops))
        return chat_arithmetic.make_rows(t.num_train_rows, t.num_eval_rows, seed, ops, t.operand_min, t.operand_max)
    if t.name in TOOL_TASKS:  # held-out problems are never among the training rows
        chain = {"worked_example": t.worked_example, "nudge": t.nudge} if t.name == "tool_chain" else {}
        rows = TOOL_TASKS[t.name].make_rows(t.num_train_rows, t.num_eval_rows, seed, **chain)
        return checked_split(*rows, "task.name")
    if t.name == "reasoning_gym":  # held-out rows from seeds training never uses, none asked in training
        return checked_split(*reasoning_gym.make_rows(t, seed), "task.datasets")
    if t.name == "bfcl":  # a split fixed by row id: held-out rows are never training rows, in any run
        return checked_split(*bfcl_rows.make_rows(t, tools.parser, seed), "task.categories")
    if t.name == "textarena":  # one game seed per row; held-out seeds from a range training never draws
        return textarena.game_rows(t.num_train_rows, t.num_eval_rows, seed)
    if t.train_file is None and t.env is not None:  # rows for reset(**row), or only an episode seed each
        env = resolve_dotted(t.env)
        make = env.make_rows if hasattr(env, "make_rows") else seed_rows
        if hasattr(env, "make_eval_rows"):  # a held-out set of its own, never among the training rows
            try:
                held_out = env.make_eval_rows(t.num_eval_rows, seed)
            except ValueError as e:
                raise ConfigError([str(e)]) from None
            return checked_split(make(t.num_train_rows, seed), held_out, "task.env")
        return make(t.num_train_rows, seed), make(t.num_eval_rows, seed + 7_919)
    for_env = t.env is not None
    train = load_rows(t.train_file, t.prompt_key, t.answer_key, for_env)
    if not t.eval_file:
        return train, train[: t.num_eval_rows]
    return checked_split(train, load_rows(t.eval_file, t.prompt_key, t.answer_key, for_env), "task.eval_file")


def checked_split(train: list[dict], held_out: list[dict], key: str) -> tuple[list[dict], list[dict]]:
    """The rows as given, or ConfigError (one line) naming the first held-out row that is also a
    training question: held-out accuracy must measure problems never trained on."""
    if (rows := overlap(train, held_out)) is not None:
        raise ConfigError([f"{key}: held-out row {rows[0]} asks the same question as training row {rows[1]}"])
    return train, held_out
