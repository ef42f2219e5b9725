"""Config: YAML + overrides, every error at once with its key path, shipped configs valid."""
from pathlib import Path

import pytest
import yaml

from relay.config import Config, ConfigError, load_config, save_resolved

REPO = Path(__file__).resolve().parents[2]
RUN_CONFIGS = sorted(p for p in (REPO / "configs").glob("*.yaml") if p.name != "tune.yaml")


@pytest.mark.parametrize("path", RUN_CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_validates(path):
    assert isinstance(load_config(path), Config)


def test_defaults_validate_without_a_file():
    assert load_config(None).rollout.engine == "hf"


def test_overrides_are_typed_and_dotted():
    cfg = load_config(REPO / "configs/default.yaml", ["training.lr=1e-5", "rollout.n=4", "rollout.stop=[\"</tool>\"]", "run.name=x"])
    assert cfg.training.lr == 1e-5 and isinstance(cfg.training.lr, float)
    assert cfg.rollout.n == 4 and cfg.rollout.stop == ("</tool>",) and cfg.run.name == "x"


def test_bad_config_lists_every_problem_with_its_key():
    with pytest.raises(ConfigError) as err:
        load_config(REPO / "configs/default.yaml", [
            "training.lrr=1",  # unknown key
            "rollout.temperature=hot",  # wrong type
            "rollout.top_p=1.5",  # out of range
            "rollout.engine=vlm",  # not a choice
            "training.prompts_per_step=15", "resources.rollout.count=2",  # does not divide
            "checkpoint.keep_last_n=0",
        ])
    problems = err.value.problems
    text = "\n".join(problems)
    assert "training.lrr: unknown key (did you mean training.lr?)" in text
    assert "rollout.temperature: expected a number" in text
    assert "rollout.top_p: must be in (0, 1]" in text
    assert "rollout.engine: 'vlm' is not one of" in text and "did you mean 'vllm'" in text
    assert "does not divide among resources.rollout.count=2" in text
    assert "checkpoint.keep_last_n" in text
    assert len(problems) == 6


def test_unknown_section_and_bad_override_syntax(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("trainig:\n  steps: 3\n")
    with pytest.raises(ConfigError) as err:
        load_config(bad, ["no_equals_sign"])
    text = str(err.value)
    assert "trainig: unknown key (did you mean training?)" in text
    assert "override 'no_equals_sign'" in text


def test_missing_files_and_dotted_paths_are_reported(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(None, ["task.name=custom", f"task.train_file={tmp_path}/nope.jsonl", "task.reward_fn=no_such_pkg:fn"])
    text = str(err.value)
    assert "task.train_file: file not found" in text and "task.reward_fn: cannot load 'no_such_pkg:fn'" in text


def test_resolved_config_round_trips(tmp_path):
    cfg = load_config(REPO / "configs/default.yaml", ["training.steps=7"])
    save_resolved(cfg, tmp_path / "config.yaml")
    assert load_config(tmp_path / "config.yaml") == cfg
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["training"]["steps"] == 7
