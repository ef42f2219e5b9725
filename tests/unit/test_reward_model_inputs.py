"""Bad reward-model input: one clear line naming the key and exit code 2, before Ray or any actor
starts (reward_model.*; relay.models.check.check_reward_model and relay.config.reward_model)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import driver
from relay.config import ConfigError, load_config
from relay.models.check import check_reward_model
from relay.models.shipped import RM_NAME, shipped_model

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "relay/models/shipped/tiny"


def fails(capsys, tmp_path, *argv) -> str:
    """driver.main(argv) exits 2 with exactly one line on stderr, and no run folder was made."""
    out = tmp_path / "runs"
    code = driver.main([*argv, f"run.output_dir={out}"])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("relay: error: "), err
    assert not out.exists() or not any(out.iterdir())
    return lines[0]


def test_a_causal_lm_is_not_a_classifier_reward_model(capsys, tmp_path):
    line = fails(capsys, tmp_path, f"reward_model.path={TINY}")
    assert f"reward_model.path: {TINY} is not a sequence classifier" in line
    assert "['Qwen2ForCausalLM']" in line and "reward_model.kind=judge" in line


def test_a_reward_model_tokenizer_without_a_chat_template(capsys, tmp_path):
    folder = tmp_path / "rm-no-template"
    shutil.copytree(shipped_model(RM_NAME), folder)
    (folder / "chat_template.jinja").unlink()
    line = fails(capsys, tmp_path, f"reward_model.path={folder}")
    assert f"reward_model.path: {folder}: its tokenizer has no chat template" in line


def test_a_classifier_with_more_than_one_label(tmp_path):
    folder = tmp_path / "two-labels"
    shutil.copytree(shipped_model(RM_NAME), folder)
    config = json.loads((folder / "config.json").read_text())
    config["id2label"] = {"0": "bad", "1": "good"}
    config["label2id"] = {"bad": 0, "good": 1}
    (folder / "config.json").write_text(json.dumps(config))
    cfg = load_config(None, [f"reward_model.path={folder}"])
    with pytest.raises(ConfigError, match="a sequence classifier with 2 labels; a reward model has one"):
        check_reward_model(cfg.reward_model)


def test_a_judge_needs_a_template(capsys, tmp_path):
    line = fails(capsys, tmp_path, "reward_model.path=tiny-rm", "reward_model.kind=judge")
    assert line.startswith("relay: error: reward_model.judge.template: required with reward_model.kind=judge")


def test_reward_model_keys_are_checked_together(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config(
            None,
            [
                "reward_model.path=tiny-rm",
                "reward_model.micro_batch_size=0",
                "reward_model.weight=0",
                "resources.reward_model.count=0",
                "reward_model.kind=judge",
                'reward_model.judge.template="{prompt} {answer}"',
            ],
        )
    keys = [p.split(":")[0] for p in e.value.problems]
    assert keys == [
        "reward_model.micro_batch_size",
        "reward_model.weight",
        "resources.reward_model.count",
        "reward_model.judge.template",
    ]


def test_the_shipped_reward_model_passes_the_checks():
    cfg = load_config(REPO / "configs/grpo_rm.yaml")
    assert check_reward_model(cfg.reward_model) == str(shipped_model(RM_NAME))
