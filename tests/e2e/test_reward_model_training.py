"""configs/grpo_rm.yaml end to end: the tiny policy trained against the shipped reward
model alone (reward_model.rule_weight=0) through a real RewardModel actor. The scores reach the
rewards and the metrics, held-out accuracy stays the rule's (never the reward model's), and it
rises: 0.527 -> 0.680 after these 10 steps here (docs/benchmarks/reward_model.md has the
other seeds; tests/e2e/test_reward_model_rise.py runs the whole recipe over three seeds)."""

import json
from pathlib import Path

from relay.config import load_config
from relay_trainer import loop

REPO = Path(__file__).resolve().parents[2]
QUIET = ["logging.console=false", "checkpoint.save_hf_model=false", "checkpoint.every=0"]


def test_the_policy_trained_on_the_reward_model_alone_gets_more_held_out_sums_right(tmp_path, ray_session):
    overrides = ["training.steps=10", "logging.samples_every=10"]
    cfg = load_config(REPO / "configs/grpo_rm.yaml", [f"run.output_dir={tmp_path}", *QUIET, *overrides])
    assert cfg.reward_model.rule_weight == 0.0  # the rule is no part of the training reward
    summary = loop.train(cfg)
    run_dir = Path(summary["run_dir"])
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(steps) == 10
    for m in steps:
        assert m["rm/errors"] == 0 and m["reward/errors"] == 0 and m["rm/seconds"] > 0
        assert m["rm/score_std"] > 0  # the reward model tells the answers apart
        assert abs(m["reward/mean"]) < 2 and 0 <= m["rm/rule_reward_mean"] <= 1  # normalised scores train
    episode = (run_dir / "samples" / "step_000010.txt").read_text()
    assert "reward model score" in episode and "rule reward" in episode
    # the rule's held-out (greedy) accuracy, before and after: the shipped tiny model gets 0.527
    assert abs(summary["accuracy_before"] - 0.527) < 0.01
    assert summary["accuracy_after"] >= summary["accuracy_before"] + 0.08
