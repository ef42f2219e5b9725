"""relay: the pure library (torch + stdlib + transformers). Never imports ray.

The names user code imports, each loaded on first use (so `import relay.config` stays light):

    from relay import ConfigStore, RayPPOTrainer, BaseEnvironment, EnvironmentConfig, Trajectory
    from relay import algo, create_inference_engine, MultiTurnInferenceEngine, ToolRegistry, Tool

RayPPOTrainer drives Ray actors, so it lives in the layer above (relay_trainer/ppo_trainer.py) and
is named here by a string: importing relay, or any module in it, never loads ray.
"""

import importlib

_EXPORTS = {
    "BaseEnvironment": "relay.envs.contract",
    "EnvConfig": "relay.envs.contract",
    "EnvironmentConfig": "relay.envs.contract",
    "Trajectory": "relay.envs.trajectory",
    "RolloutData": "relay.envs.trajectory",
    "episode_metrics": "relay.agent.metrics",
    "ConfigStore": "relay.api.config_store",
    "create_inference_engine": "relay.api.inference",
    "InferenceEngine": "relay.api.inference",
    "MultiTurnInferenceEngine": "relay.api.inference",
    "BatchInferenceManager": "relay.api.inference",
    "Tool": "relay.api.tools",
    "ToolRegistry": "relay.api.tools",
    "MultiTurnManager": "relay.api.tools",
    "JSONActionParser": "relay.api.tools",
    "ReActActionParser": "relay.api.tools",
    "FunctionCallingParser": "relay.api.tools",
    "RayPPOTrainer": "relay_trainer.ppo_trainer",  # the one name from the layer above (it imports ray)
}
_MODULES = {"algo": "relay.api.algo"}  # `from relay import algo`: a module of functions

__all__ = sorted([*_EXPORTS, *_MODULES])


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    if name in _MODULES:
        return importlib.import_module(_MODULES[name])
    raise AttributeError(f"module 'relay' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
