"""The engine registry (relay/config/engine_registry.py) against what reads it: every entry's class
has every member of the Engine protocol, the config's choices are the registry's names, the config
checks ask the capability records (not the names), and reading the registry imports no engine."""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from relay.config import ENGINES, ConfigError, EngineCapabilities, load_config
from relay.config.engine_registry import engines_that
from relay.config.reward_model import JudgeConfig
from relay.config.role_settings import ColocatedSettings
from relay.config.schema import RolloutConfig
from relay.engines import engine_class
from relay.engines.base import Engine, SharingEngine

REPO = Path(__file__).resolve().parents[2]


def protocol_members(protocol: type) -> set[str]:
    """The names a protocol declares: methods, properties and annotated attributes, its bases' too."""
    names: set[str] = set()
    for klass in protocol.__mro__:
        if klass in (object, typing.Protocol, typing.Generic):
            continue
        names |= {n for n in vars(klass) if not n.startswith("_")}
        names |= set(getattr(klass, "__annotations__", {}))
    return names


@pytest.mark.parametrize("name", list(ENGINES))
def test_every_engine_class_has_the_protocol_its_record_promises(name):
    cls, can = engine_class(name), ENGINES[name].can
    # `tokenizer` is set in __init__ (a vLLM or SGLang engine cannot be built here): read the sources
    source = "".join(inspect.getsource(klass) for klass in cls.__mro__ if klass is not object)
    members = protocol_members(SharingEngine if can.colocate else Engine)
    missing = [m for m in members if not hasattr(cls, m) and f"self.{m} =" not in source]
    assert not missing, f"{name}: {cls.__name__} lacks {missing}"
    generate = inspect.signature(cls.generate).parameters
    assert generate["chunk"].kind is generate["between"].kind is inspect.Parameter.KEYWORD_ONLY
    init = inspect.signature(cls.__init__).parameters  # make_engine's call
    assert list(init)[1:5] == ["model_path", "dtype", "tokenizer_path", "trust_remote_code"]
    assert ("lora" in init) == (can.max_lora_adapter_rank > 0), name


def test_the_configs_engine_choices_are_the_registry():
    for config in (RolloutConfig, JudgeConfig):
        assert typing.get_args(typing.get_type_hints(config)["engine"]) == tuple(ENGINES)
    with pytest.raises(ConfigError) as e:
        load_config(None, ["rollout.engine=vlm", "reward_model.judge.engine=hff"])
    assert e.value.problems == [
        f"rollout.engine: 'vlm' is not one of {list(ENGINES)} (did you mean 'vllm'?)",
        f"reward_model.judge.engine: 'hff' is not one of {list(ENGINES)} (did you mean 'hf'?)",
    ]


def test_vllms_adapter_rank_is_the_largest_vllm_accepts():
    from relay.engines.vllm_lora import VLLM_LORA_RANKS

    assert ENGINES["vllm"].can.max_lora_adapter_rank == max(VLLM_LORA_RANKS)


def problems(overrides: list[str]) -> list[str]:
    try:
        load_config("configs/default.yaml", overrides)
    except ConfigError as e:
        return e.problems
    return []


def test_the_config_checks_ask_the_capability_record_not_the_name(monkeypatch):
    """SGLang given HF's record (and no package to find) passes every check HF passes; HF given
    SGLang's fails them, each line naming the key and the engines that can."""
    partial = ["rollout.engine=sglang", "rollout.partial=true", "training.mode=one_step_off"]
    colocate = ["rollout.engine=sglang", "resources.colocate=true"]
    assert problems(partial) and problems(colocate)
    monkeypatch.setitem(ENGINES, "sglang", dataclasses.replace(ENGINES["hf"], engine_class="x:Y"))
    assert problems(partial) == problems(colocate) == []

    monkeypatch.setitem(ENGINES, "hf", dataclasses.replace(ENGINES["hf"], can=EngineCapabilities(gpu_only=True)))
    gpus = "rollout.engine: the hf engine runs on GPUs only: set resources.rollout.gpus > 0, got 0.0"
    chunks = ", ".join(engines_that(lambda can: can.partial_rollouts))  # vllm, sglang (and any added since)
    assert problems(["rollout.partial=true", "training.mode=one_step_off"]) == [
        f"rollout.partial: the hf engine cannot generate in chunks and load weights between them (engines that can: {chunks})",
        gpus,
    ]
    adapters = ", ".join(engines_that(lambda can: can.max_lora_adapter_rank > 0))  # vllm
    assert problems(["model.lora.rank=8", "model.lora.sync=adapter"]) == [
        f"model.lora.sync: the hf engine cannot serve LoRA adapters (engines that can: {adapters}); "
        "it takes merged weights (use auto or merged)",
        gpus,
    ]


def test_a_colocated_worker_builds_the_registered_class(monkeypatch, tiny_model_path):
    """resources.colocate asks the registry for the class, so an engine with colocate is used by name."""
    import actors.colocated
    from relay.engines.hf import HFEngine

    class Tagged(HFEngine):
        pass

    monkeypatch.setattr(actors.colocated, "engine_class", lambda name: Tagged)
    cfg = load_config("configs/default.yaml", ["resources.colocate=true"])
    worker = actors.colocated.ColocatedWorker(ColocatedSettings.of(cfg), tiny_model_path, num_threads=1)
    assert type(worker.worker.engine) is Tagged and worker.worker.engine.model is worker.learner.model


def test_reading_the_registry_and_the_engine_package_imports_no_engine():
    code = (
        "import sys, relay.engines, relay.engines.base; from relay.config import ENGINES; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('vllm', 'sglang', 'transformers') "
        "or m in ('relay.engines.hf', 'relay.engines.vllm', 'relay.engines.sglang')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert done.stdout.strip() == "[]"


def test_an_unknown_name_fails_naming_the_key():
    with pytest.raises(ValueError, match=r"rollout.engine: 'nope' is not available in this build \(known: hf, "):
        engine_class("nope")
