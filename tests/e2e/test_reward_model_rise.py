"""Issue 17: configs/grpo_rm.yaml trains the tiny policy against the shipped reward model alone
(reward_model.rule_weight=0), and its held-out accuracy, measured by the exact rule and never by
the reward model, rises. The recipe as shipped, fewer steps: the rise shows within 20 (held-out
0.527 -> about 0.7 at step 10 and 20 over seeds 0-2, docs/reward_models.md)."""

import json
from pathlib import Path

import pytest

import driver
from relay.config import load_config

REPO = Path(__file__).resolve().parents[2]
QUIET = ["logging.console=false", "checkpoint.save_hf_model=false", "checkpoint.every=0", "logging.samples_every=0"]


@pytest.mark.slow
def test_the_policy_trained_on_the_reward_model_alone_gets_more_held_out_sums_right(tmp_path, ray_session):
    cfg = load_config(REPO / "configs/grpo_rm.yaml", [f"run.output_dir={tmp_path}", *QUIET, "training.steps=20"])
    assert cfg.reward_model.rule_weight == 0.0  # the rule is no part of the training reward
    summary = driver.train(cfg)
    steps = [json.loads(line) for line in (Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    assert len(steps) == 20 and all(m["rm/errors"] == 0 and m["rm/score_std"] > 0 for m in steps)
    assert summary["accuracy_before"] == pytest.approx(0.527, abs=0.01)  # the shipped tiny model, greedy
    assert summary["accuracy_after"] >= summary["accuracy_before"] + 0.08
