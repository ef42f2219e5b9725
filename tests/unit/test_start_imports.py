"""Start-up pays only for what a process uses: an EnvPool imports neither torch nor transformers,
the driver neither transformers' model code nor FSDP, and checking a local model folder reads its
config.json instead of importing the model's code. Each check runs in a fresh interpreter."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from relay.config import ConfigError
from relay.models.check import check_model_source

REPO = Path(__file__).resolve().parents[2]


def imported_after(code: str, modules: tuple[str, ...]) -> list[str]:
    probe = f"import sys; {code}; print(sorted(m for m in {modules!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1].replace("'", '"'))


def test_an_env_pool_imports_neither_torch_nor_transformers():
    code = "import actors.env, relay.envs.arithmetic, relay.envs.textgame, relay.envs.math_tool, relay.envs.base"
    assert imported_after(code, ("torch", "transformers")) == []


def test_the_driver_checks_a_local_model_folder_without_torch_or_transformers():
    code = (
        "import driver; from relay.models.shipped import tiny_model; "
        "from relay.models.check import check_model_source; check_model_source(str(tiny_model(None)), 'model.path')"
    )
    assert imported_after(code, ("torch", "transformers", "sympy")) == []


def test_a_local_config_transformers_does_not_know_still_fails_with_its_key(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "no-such-architecture"}')
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ConfigError, match="model.path: .*cannot load its config"):
        check_model_source(str(tmp_path), "model.path", tokenizer=False)


@pytest.mark.parametrize("overrides", [[], ["resources.colocate=true"]])
def test_the_driver_of_a_default_run_loads_no_torch(overrides):
    """What the driver process runs on the default run (and the colocated one): its imports, the
    config and its validation, the model path, the sample writer's tokenizer, the RNG capture of a
    checkpoint, the KL controller. The actors' classes are started by name (relay_trainer/actor_class.py);
    tensors reach the driver neither as results (the learner builds the Batch, checkpoints come as
    bytes) nor as arguments (tests/e2e/test_training.py runs it whole, marked slow)."""
    code = (
        "import driver, relay_trainer.pools; from relay.config import load_config; "
        "from relay.run.model_source import resolve_model_path; from relay.run.rows import task_rows; from relay.run.samples import _load_tokenizer; "
        "from relay.checkpoint.rng import capture_rng; from relay.update.kl_control import make_kl_controller; "
        f"cfg = load_config('configs/default.yaml', {overrides!r}); "
        "path = resolve_model_path(cfg.model, cfg.task, cfg.tools, cfg.critic, cfg.reward_model); "
        "task_rows(cfg.task, cfg.tools, cfg.run.seed); "
        "_load_tokenizer(path, False).decode([5, 6], skip_special_tokens=False); capture_rng(); "
        "make_kl_controller('adaptive', 0.1, 6.0, 10000)"
    )
    assert imported_after(code, ("torch", "transformers", "safetensors")) == []


def test_the_actor_classes_started_by_name_have_the_real_classes_methods():
    import importlib
    import inspect

    import relay_trainer.pools as pools

    names = (
        "ColocatedWorker",
        "Critic",
        "EnvPool",
        "Learner",
        "Reference",
        "RewardModel",
        "RolloutWorker",
        "ToolExecutor",
    )
    for name in names:
        shell = getattr(pools, name)
        module, real_name = shell.__relay_actor__
        real = getattr(importlib.import_module(module), real_name)
        # with those it inherits (actors/plumbing.py, rank_group.py, weight_ends.py)
        methods = {m for m, _ in inspect.getmembers(real, inspect.isfunction) if not m.startswith("__")}
        assert {m for m in vars(shell) if not m.startswith("__")} == methods, name
        for m in methods:  # a generator stays one: Ray streams its items
            assert inspect.isgeneratorfunction(getattr(shell, m)) == inspect.isgeneratorfunction(getattr(real, m)), m
