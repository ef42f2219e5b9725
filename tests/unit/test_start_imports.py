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


def test_the_driver_imports_no_model_code_and_no_fsdp():
    code = (
        "import driver; from relay.models.shipped import tiny_model; "
        "from relay.models.check import check_model_source; check_model_source(str(tiny_model(None)), 'model.path')"
    )
    assert imported_after(code, ("torch._dynamo", "torch.distributed.fsdp", "sympy")) == []


def test_a_local_config_transformers_does_not_know_still_fails_with_its_key(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "no-such-architecture"}')
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ConfigError, match="model.path: .*cannot load its config"):
        check_model_source(str(tmp_path), "model.path", tokenizer=False)
