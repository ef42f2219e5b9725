"""Refuse a multi-turn run whose chat template renders other tokens than relay's agent loop lays down.

A multi-turn run (tools.enabled or task.env) trains on tokens appended turn by turn, never
re-rendered (relay/agent/loop.py); if the model's template renders the same conversation into other
tokens (relay/models/template_check.py), the model is trained on a layout it will not be shown when
served through that template. The driver refuses such a run before any actor starts, one line,
unless model.allow_template_drift is true. A single-turn run renders only its prompt, with the
generation prompt, and relies on nothing more, so it is never checked.

Cost: the check needs transformers and the tokenizer (seconds in the driver, which otherwise never
imports transformers), so its verdict is kept in the relay cache (relay/models/cache.py) under a key
made of the tokenizer's files, the transformers and tokenizers versions and this checker's source:
a tokenizer is checked once per machine.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
from pathlib import Path

from relay.config import ConfigError, ModelConfig, TaskConfig, ToolsConfig
from relay.models.cache import cache_dir, file_sha256

# Weights play no part in the verdict; everything else in the folder may shape the tokenizer or its template.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".msgpack", ".h5")


def check_template_drift(m: ModelConfig, task: TaskConfig, tools: ToolsConfig, model_path: str) -> None:
    """Raise ConfigError when a multi-turn run's chat template drifts from relay's token layout.
    `model_path`: the resolved model.path (relay/models/resolve.py)."""
    if m.allow_template_drift or task.prompt_format == "raw" or not (tools.enabled or task.env):
        return
    from relay.models.resolve import model_folder

    key = "model.tokenizer_path" if m.tokenizer_path else "model.path"
    folder = model_folder(m.tokenizer_path, key) if m.tokenizer_path else model_path
    problem = template_verdict(folder, m.trust_remote_code)
    if problem:
        raise ConfigError(
            [
                f"{key}: {m.tokenizer_path or m.path}: its chat template renders a conversation into other tokens than "
                f"relay appends turn by turn ({problem}); `python -m relay.models.template_check "
                f"{m.tokenizer_path or m.path}` shows where; set model.allow_template_drift=true to train anyway"
            ]
        )


def template_verdict(folder: str, trust_remote_code: bool = False) -> str:
    """'' when the template keeps relay's layout (or there is no template: raw prompts are checked
    elsewhere), else the first failing check in a few words. Cached per tokenizer for a local folder."""
    local = Path(folder)
    cached = cache_dir() / "template_checks" / f"{verdict_key(local)}.json" if local.is_dir() else None
    if cached is not None and cached.is_file():
        return json.loads(cached.read_text())["problem"]
    from relay.models.loading import load_tokenizer
    from relay.models.template_check import check_template, failures

    tokenizer = load_tokenizer(folder, trust_remote_code)
    failed = failures(check_template(tokenizer)) if tokenizer.chat_template else []
    problem = f"{failed[0].name} fails at {failed[0].where}" if failed else ""
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".tmp{id(cached)}")
        tmp.write_text(json.dumps({"folder": folder, "problem": problem}) + "\n")
        tmp.replace(cached)  # atomic: a concurrent run reads the whole verdict or none
    return problem


def verdict_key(folder: Path) -> str:
    h = hashlib.sha256()
    versions = [importlib.metadata.version(p) for p in ("transformers", "tokenizers")]
    # the checks themselves and the layout they compare against (relay/envs/chat.py)
    sources = [Path(__file__).with_name("template_check.py"), Path(__file__).parents[1] / "envs" / "chat.py"]
    h.update(json.dumps([versions, [file_sha256(s) for s in sources]]).encode())
    for f in sorted(folder.iterdir()):
        if f.is_file() and not f.name.endswith(WEIGHT_SUFFIXES) and not f.name.startswith("."):
            h.update(f"{f.name}\0{file_sha256(f)}\0".encode())
    return h.hexdigest()
