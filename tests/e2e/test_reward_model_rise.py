"""configs/grpo_rm.yaml as shipped trains the tiny policy against the reward model alone
(reward_model.rule_weight=0), and held-out accuracy, measured by the exact rule and never by the
reward model, rises on every seed (docs/benchmarks/reward_model.md has the numbers)."""

from pathlib import Path

import pytest

from relay.config import load_config
from relay_trainer import loop

REPO = Path(__file__).resolve().parents[2]
QUIET = ["logging.console=false", "checkpoint.save_hf_model=false", "checkpoint.every=0", "logging.samples_every=0"]


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_whole_reward_model_recipe_raises_held_out_accuracy_on_every_seed(tmp_path, ray_session, seed):
    cfg = load_config(REPO / "configs/grpo_rm.yaml", [f"run.output_dir={tmp_path}", *QUIET, f"run.seed={seed}"])
    assert cfg.reward_model.rule_weight == 0.0
    summary = loop.train(cfg)
    assert summary["accuracy_after"] >= summary["accuracy_before"] + 0.05
