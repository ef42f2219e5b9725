"""configs/grpo_rm.yaml end to end, a few steps: the tiny policy trained against the shipped reward
model alone (reward_model.rule_weight=0) through a real RewardModel actor. The scores reach the
rewards and the metrics; held-out accuracy stays the rule's (never the reward model's).

Whether held-out accuracy rises is not asserted: on the 60-step recipe the policy learned to game
tiny-rm (held-out accuracy 0.527 -> 0.109; docs/reward_models.md)."""

import json
from pathlib import Path

import driver
from relay.config import load_config

REPO = Path(__file__).resolve().parents[2]
QUIET = ["logging.console=false", "checkpoint.save_hf_model=false", "checkpoint.every=0"]


def test_the_reward_model_path_runs_end_to_end_and_counts_its_scores(tmp_path, ray_session):
    overrides = ["training.steps=3", "training.prompts_per_step=8", "task.num_eval_rows=32", "logging.samples_every=1"]
    cfg = load_config(REPO / "configs/grpo_rm.yaml", [f"run.output_dir={tmp_path}", *QUIET, *overrides])
    summary = driver.train(cfg)
    run_dir = Path(summary["run_dir"])
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(steps) == 3
    for m in steps:
        assert m["rm/errors"] == 0 and m["reward/errors"] == 0 and m["rm/seconds"] > 0
        assert m["rm/score_std"] > 0  # the reward model tells the answers apart
        # rule_weight=0: the batch reward is the reward model's score, not the rule's 0/1
        assert abs(m["reward/mean"] - m["rm/score_mean"]) < 1e-4 and 0 <= m["rm/rule_reward_mean"] <= 1
    episode = (run_dir / "samples" / "step_000003.txt").read_text()
    assert "reward model score" in episode and "rule reward" in episode
    assert 0 <= summary["accuracy_after"] <= 1  # the rule's held-out accuracy
