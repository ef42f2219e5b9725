"""The models shipped in the repository, and which one `model.path: tiny` means.

Each is a small Hugging Face folder under relay/models/shipped/<name>/ (safetensors weights,
config, tokenizer). manifest.json holds every file's sha256 and the recipe that built it;
loading checks the files against it, so every machine trains the very same model.
`python -m relay.models.build --all` rebuilds them from code and rewrites the manifest.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

from relay.config import ConfigError, resolve_dotted

SHIPPED_DIR = Path(__file__).parent / "shipped"
MANIFEST = SHIPPED_DIR / "manifest.json"
BASE = "tiny"
# The warm starts of the base on the built-in agent tasks: shipped name -> environment class.
TASK_MODELS = {"tiny-math_tool": "relay.envs.math_tool:MathToolEnv", "tiny-textgame": "relay.envs.textgame:TextGameEnv"}
REBUILD = "python -m relay.models.build --all"
# The reward model for the built-in arithmetic task (reward_model.path: tiny-rm), built from the
# tiny model by `python -m relay.rewards.build_rm`.
RM_NAME = "tiny-rm"


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_manifest() -> dict:
    return json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {}


@functools.cache
def shipped_model(name: str) -> Path:
    """Folder of the shipped model `name`, every file checked against the manifest."""
    entry = read_manifest().get(name)
    if entry is None:
        raise ConfigError([f"{MANIFEST}: no shipped model {name!r} (rebuild them with `{REBUILD}`)"])
    folder = SHIPPED_DIR / name
    for file, digest in entry["files"].items():
        path = folder / file
        if not path.is_file():
            raise ConfigError(
                [f"{path}: missing (restore it with `git checkout -- {path}` or rebuild with `{REBUILD}`)"]
            )
        if file_sha256(path) != digest:
            raise ConfigError(
                [
                    f"{path}: sha256 differs from {MANIFEST.name} (changed, truncated, or a Git LFS pointer); "
                    f"restore it with `git checkout -- {path}` or rebuild with `{REBUILD}`"
                ]
            )
    return folder


def tiny_model(env: str | None = None) -> Path:
    """What `model.path: tiny` loads: the task's shipped warm start when `env` is a built-in agent
    task, else the base tiny model."""
    if env is not None:
        env_cls = resolve_dotted(env)
        for name, task_env in TASK_MODELS.items():
            if resolve_dotted(task_env) is env_cls:
                return shipped_model(name)
    return shipped_model(BASE)
