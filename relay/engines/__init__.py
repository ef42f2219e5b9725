"""Rollout engines behind one protocol (relay.engines.base.Engine), built by name from the
registry (relay/config/engine_registry.py ENGINES). Importing this package imports no engine: a
class is imported when an engine is built, so the driver never loads torch, vLLM or SGLang."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from relay.config.engine_registry import ENGINES
from relay.engines.base import Engine

if TYPE_CHECKING:
    from relay.config.role_settings import EngineSettings


def engine_class(name: str) -> type:
    """The class registered as `name`, imported now."""
    if name not in ENGINES:
        raise ValueError(f"rollout.engine: {name!r} is not available in this build (known: {', '.join(ENGINES)})")
    module, _, attr = ENGINES[name].engine_class.partition(":")
    return getattr(importlib.import_module(module), attr)


def make_engine(settings: EngineSettings, model_path: str) -> Engine:
    """The engine named by `settings.engine` (rollout.engine, or reward_model.judge.engine: the
    settings' `of` and `judge`); native options pass through untouched. Every engine
    takes (model_path, dtype, tokenizer_path, trust_remote_code, **engine_kwargs); one that serves
    LoRA adapters also takes `lora`: the config to serve, or None when syncs send merged weights."""
    from relay.models.resolve import model_folder

    m, name, kwargs = settings.model, settings.engine, settings.engine_kwargs
    cls = engine_class(name)
    # a GGUF tokenizer_path: its converted folder, which vLLM and SGLang can read too
    tokenizer_path = model_folder(m.tokenizer_path, "model.tokenizer_path") if m.tokenizer_path else None
    if ENGINES[name].can.max_lora_adapter_rank > 0:
        lora = m.lora if m.lora.sends_adapters(name) else None
        return cls(model_path, m.dtype, tokenizer_path, m.trust_remote_code, lora=lora, **kwargs)
    if name == "hf" and m.attn_implementation:  # the engine loads its own copy of the learner's model
        attn = m.attn_implementation
        return cls(model_path, m.dtype, tokenizer_path, m.trust_remote_code, attn_implementation=attn, **kwargs)
    return cls(model_path, m.dtype, tokenizer_path, m.trust_remote_code, **kwargs)
