"""The models shipped in the repository: checked on load, small, resolved from config, and
rebuilt from code into a model that behaves like the shipped one (not bit for bit: other
machines reduce floats in another order)."""

import shutil

import pytest

from relay.config import ConfigError, load_config
from relay.envs.arithmetic import make_rows
from relay.models import shipped
from relay.models.build import HELD_OUT_SEED, build_base
from relay.models.loading import load_model, load_tokenizer
from relay.models.tiny import TinySpec, greedy_accuracy
from relay.run.model_source import resolve_model_path

NAMES = [shipped.BASE, *shipped.TASK_MODELS]


@pytest.mark.parametrize("name", NAMES)
def test_every_shipped_file_matches_the_manifest_and_is_small(name):
    folder = shipped.shipped_model(name)
    files = shipped.read_manifest()[name]["files"]
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= set(files)
    assert sum((folder / f).stat().st_size for f in files) < 5 * 2**20


def test_model_path_tiny_means_the_tasks_shipped_model():
    cfg = load_config(None, [])
    assert resolve_model_path(cfg.model, cfg.task, cfg.tools, cfg.critic, cfg.reward_model) == str(
        shipped.SHIPPED_DIR / "tiny"
    )
    for name, env in shipped.TASK_MODELS.items():
        cfg = load_config(None, [f"task.env={env}", "task.name=custom"])
        path = resolve_model_path(cfg.model, cfg.task, cfg.tools, cfg.critic, cfg.reward_model)
        assert path == str(shipped.SHIPPED_DIR / name)


def test_a_changed_file_is_named_in_one_line(tmp_path, monkeypatch):
    copy = tmp_path / "shipped"
    shutil.copytree(shipped.SHIPPED_DIR, copy)
    with open(copy / "tiny" / "model.safetensors", "r+b") as f:
        f.truncate(1000)
    monkeypatch.setattr(shipped, "SHIPPED_DIR", copy)
    monkeypatch.setattr(shipped, "MANIFEST", copy / "manifest.json")
    shipped.shipped_model.cache_clear()
    try:
        with pytest.raises(ConfigError) as e:
            shipped.shipped_model("tiny")
    finally:
        shipped.shipped_model.cache_clear()
    [problem] = e.value.problems
    assert "tiny/model.safetensors: sha256 differs" in problem and "git checkout" in problem


@pytest.mark.slow
def test_a_rebuild_behaves_like_the_shipped_tiny_model(tmp_path):
    """About 4 minutes on one core: the whole warm start of the recipe (the slow tier: `pytest -m slow`)."""
    spec = TinySpec()
    rebuilt = build_base(tmp_path, spec)
    path = shipped.shipped_model("tiny")
    accuracy, well_formed = greedy_accuracy(
        load_model(str(path)), load_tokenizer(str(path)), make_rows(256, HELD_OUT_SEED, spec.digits)
    )
    assert well_formed > 0.95 and rebuilt["well_formed"] > 0.95
    assert abs(rebuilt["held_out_accuracy"] - accuracy) <= 0.05, (rebuilt["held_out_accuracy"], accuracy)
