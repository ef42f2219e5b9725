"""Is `model.path` (or `model.tokenizer_path`) something every role can load? Checked in the
driver before Ray starts, so a folder without weights or a hub name without network is one
ConfigError line naming the key, not an actor's traceback minutes later."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from relay.config import ConfigError

# What transformers' from_pretrained loads weights from: single files, shards and their index.
WEIGHT_FILES = ("*.safetensors", "*.safetensors.index.json", "pytorch_model*.bin", "pytorch_model.bin.index.json")
# A tokenizer saved by save_pretrained (fast, sentencepiece or vocabulary-file based).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt")


def check_model_source(
    path: str, key: str, trust_remote_code: bool = False, model: bool = True, tokenizer: bool = True
) -> None:
    """A local folder must hold config.json and weights (`model`) and a tokenizer (`tokenizer`);
    anything else is a hub name, whose config is fetched (or read from the local cache) once here.
    Raises ConfigError naming `key`, the path and what is missing."""
    folder = Path(path).expanduser()
    if folder.exists():
        if not folder.is_dir():
            raise ConfigError([f"{key}: {path} is a file; give the model's folder (or a hub name)"])
        missing = []
        if model and not (folder / "config.json").is_file():
            missing.append("config.json")
        if model and not any(next(folder.glob(pattern), None) for pattern in WEIGHT_FILES):
            missing.append("model weights (*.safetensors or pytorch_model*.bin)")
        if tokenizer and not any((folder / name).is_file() for name in TOKENIZER_FILES):
            missing.append(f"a tokenizer (one of {', '.join(TOKENIZER_FILES)})")
        if missing:
            raise ConfigError([f"{key}: the folder {path} is missing {'; '.join(missing)}"])
    if model and not (folder.exists() and _known_local_config(folder)):
        _load_config(path, key, trust_remote_code)


def _known_local_config(folder: Path) -> bool:
    """Whether the folder's config.json names a model type transformers ships (its package holds
    models/<model_type>/). Reading the JSON and looking for that folder spares the driver importing
    transformers at all, which loads torch (seconds, ~300 MB); anything else (custom code, no
    model_type, bad JSON, a type without a folder of its name) gets AutoConfig's own verdict."""
    spec = importlib.util.find_spec("transformers")  # finds the package without importing it
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    model_type = config.get("model_type") if isinstance(config, dict) and "auto_map" not in config else None
    if spec is None or spec.origin is None or not isinstance(model_type, str) or not model_type:
        return False
    return (Path(spec.origin).parent / "models" / model_type.replace("-", "_") / "__init__.py").is_file()


def _load_config(path: str, key: str, trust_remote_code: bool) -> None:
    from huggingface_hub.errors import GatedRepoError, LocalEntryNotFoundError, RepositoryNotFoundError
    from transformers import AutoConfig

    try:
        AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as e:
        causes, cause = [], e
        while cause is not None and len(causes) < 10:
            causes.append(cause)
            cause = cause.__cause__ or cause.__context__
        if any(isinstance(c, GatedRepoError) for c in causes):
            reason = "a gated repository on the Hugging Face Hub: accept its terms and log in (hf auth login)"
        elif any(isinstance(c, RepositoryNotFoundError) for c in causes):
            reason = "no local folder of that name and no such model on the Hugging Face Hub"
        elif any(isinstance(c, LocalEntryNotFoundError) for c in causes):
            reason = (
                "not a local folder, and offline: the Hugging Face Hub cannot be reached (no network, or "
                "HF_HUB_OFFLINE=1) and the model is not in the local cache; download it first or give a folder"
            )
        else:
            reason = f"cannot load its config ({type(e).__name__}: {str(e).strip().splitlines()[0][:300]})"
        raise ConfigError([f"{key}: {path}: {reason}"]) from None


def reward_model_path(path: str) -> str:
    """The folder (or hub name) reward_model.path names: `tiny-rm` is the classifier shipped in the
    repository (its files verified against the manifest); a GGUF file (a judge) is converted once
    (relay/models/resolve.py); a local path is expanded."""
    from relay.models.resolve import model_folder

    return model_folder(path, "reward_model.path")


def check_reward_model(rm) -> str:
    """reward_model.path is a model of its kind with a chat template (the RM re-renders every
    sample's messages with it); returns the path to load. Raises ConfigError, one line per problem."""
    path = reward_model_path(rm.path)
    check_model_source(path, "reward_model.path", rm.trust_remote_code)
    from transformers import AutoConfig, AutoTokenizer

    problems = []
    if rm.kind == "classifier":
        config = AutoConfig.from_pretrained(path, trust_remote_code=rm.trust_remote_code)
        archs = list(getattr(config, "architectures", None) or [])
        if not any(a.endswith("ForSequenceClassification") for a in archs):
            problems.append(
                f"reward_model.path: {path} is not a sequence classifier (config.json architectures: {archs or 'none'}); "
                "kind=classifier needs an AutoModelForSequenceClassification with one label (or set reward_model.kind=judge)"
            )
        elif config.num_labels != 1:
            problems.append(
                f"reward_model.path: {path} is a sequence classifier with {config.num_labels} labels; "
                "a reward model has one (its logit is the score)"
            )
    try:
        template = AutoTokenizer.from_pretrained(path, trust_remote_code=rm.trust_remote_code).chat_template
    except (OSError, ValueError) as e:
        raise ConfigError([f"reward_model.path: {path}: cannot load its tokenizer ({type(e).__name__}: {e})"]) from None
    if not template:
        problems.append(
            f"reward_model.path: {path}: its tokenizer has no chat template; the reward model reads each sample "
            "re-rendered from its messages with its own template (add one to tokenizer_config.json or chat_template.jinja)"
        )
    if problems:
        raise ConfigError(problems)
    return path
