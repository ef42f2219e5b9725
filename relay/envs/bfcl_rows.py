"""task.name=bfcl's rows: single-turn categories (relay/envs/bfcl.py) and multi-turn ones
(relay/envs/bfcl_multi_turn.py) in one split, each category held out by its own fixed rule."""

from __future__ import annotations

import random

from relay.config import ConfigError
from relay.config.bfcl import MULTI_TURN_CATEGORIES, categories
from relay.envs import bfcl
from relay.envs import bfcl_multi_turn as multi_turn
from relay.envs.reasoning_gym import shares
from relay.envs.tool_tasks import question


def make_rows(task, parser: str, seed: int) -> tuple[list[dict], list[dict]]:
    """(training rows, held-out rows) of the task's categories; no held-out row is ever a training one."""
    weights = categories(task)
    n_train, n_eval = shares(task.num_train_rows, weights), shares(task.num_eval_rows, weights)
    rng = random.Random(seed)
    train, held_out, short = [], [], []
    for category in weights:
        if category in MULTI_TURN_CATEGORIES:  # episodes in the environment: rows name the row only
            pool, held = bfcl.split(multi_turn.read_category(category), multi_turn.scenario)
            make, text = multi_turn.as_row, multi_turn.INSTRUCTION
        else:
            (pool, held), make, text = bfcl.split(bfcl.read_category(category)), bfcl.as_row, bfcl.INSTRUCTION
        instruction = task.system_prompt or text.format(syntax=bfcl.CALL_SYNTAX[parser])
        if n_eval[category] > len(held):
            short.append(f"{category} holds out {len(held)} rows, {n_eval[category]} asked")
        eval_rows = [make(category, r, instruction, parser) for r in held[: n_eval[category]]]
        asked = {question(r) for r in eval_rows}
        own = [r for r in (make(category, r, instruction, parser) for r in pool) if question(r) not in asked]
        rng.shuffle(own)
        train += [own[i % len(own)] for i in range(n_train[category])] if own else []
        held_out += eval_rows
    if short:
        raise ConfigError([f"task.num_eval_rows: {'; '.join(short)} (split by task.categories' weights)"])
    return train, held_out
