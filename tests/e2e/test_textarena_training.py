"""task.name=textarena end to end: the tiny model trains 2 steps on a textarena game through real Ray
actors (the game in the EnvPool, multi-turn), offline, with invalid moves counted."""

import json
from pathlib import Path

import pytest

from relay.config import load_config
from relay_trainer import loop

pytest.importorskip("textarena")

GAME = [
    "model.path=tiny",
    "task.name=textarena",
    "task.env_id=GuessTheNumber-v0",
    "task.env_args={max_turns: 3}",
    "task.num_eval_rows=4",
    "rollout.n=4",
    "rollout.max_new_tokens=12",
    # the tiny model was never taught to end a turn here (a turn the per-turn limit cuts ends the
    # episode): a digit ends it, so each turn is one guess the game reads ("7" -> "[7]")
    "rollout.stop=['0', '1', '2', '3', '4', '5', '6', '7', '8', '9']",
    "rollout.max_turns=3",
    "rollout.max_total_tokens=800",  # a character-level tokenizer: the game's replies are long
    "training.steps=2",
    "training.prompts_per_step=2",
    "training.micro_batch_size=64",
    "checkpoint.every=0",
    "checkpoint.save_hf_model=false",
    "logging.console=false",
]


def test_the_tiny_model_trains_two_steps_on_a_game(tmp_path, ray_session):
    summary = loop.train(load_config(None, [f"run.output_dir={tmp_path}", *GAME]))
    steps = [json.loads(line) for line in (Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    assert len(steps) == 2
    assert all(m["env/errors"] == 0 and m["reward/errors"] == 0 for m in steps)
    assert sum(m["env/invalid_moves"] for m in steps) > 0  # a number guessed twice is an invalid move
    assert all(0 <= m["env/invalid_endings"] <= 1 for m in steps)
    assert sum(m["agent/env_steps"] for m in steps) > 0  # moves reached the game
    assert "actor/loss" in steps[-1]
    assert 0 <= summary["success_rate_after"] <= 1  # held-out games won
