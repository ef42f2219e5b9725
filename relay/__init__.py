"""relay: the pure library (torch + stdlib + transformers). Never imports ray.

For user code that wants them (none of it is required):
    from relay import BaseEnvironment, EnvConfig, Trajectory, episode_metrics
"""

import importlib

_EXPORTS = {
    "BaseEnvironment": "relay.envs.contract",
    "EnvConfig": "relay.envs.contract",
    "Trajectory": "relay.envs.trajectory",
    "episode_metrics": "relay.agent.metrics",
}


def __getattr__(name: str):  # imported on first use: `import relay.config` stays light
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'relay' has no attribute {name!r}")
