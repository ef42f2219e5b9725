"""One typed, frozen config tree. YAML is data; `key=value` overrides; validate() lists every
problem at once, each with its key path, before any actor starts (after torchtune's
config/_validate.py).

    schema.py    the dataclasses: Config and its sections
    load.py      load_config (YAML + dotted overrides, typed), save_resolved
    validate.py  validate(cfg): every check
    dotted.py    resolve_dotted: user code named by `pkg.module:attr`
"""
from relay.config.dotted import check_dotted, resolve_dotted
from relay.config.load import load_config, save_resolved
from relay.config.schema import (
    AlgorithmConfig, CheckpointConfig, Config, ConfigError, CriticConfig, LoggingConfig, ModelConfig,
    ResourcesConfig, RoleResources, RolloutConfig, RunConfig, SandboxConfig, TaskConfig, ToolsConfig,
    TrainingConfig,
)
from relay.config.validate import engine_import_error, validate, validate_tools

__all__ = [
    "AlgorithmConfig", "CheckpointConfig", "Config", "ConfigError", "CriticConfig", "LoggingConfig",
    "ModelConfig", "ResourcesConfig", "RoleResources", "RolloutConfig", "RunConfig", "SandboxConfig",
    "TaskConfig", "ToolsConfig", "TrainingConfig", "check_dotted", "engine_import_error", "load_config",
    "resolve_dotted", "save_resolved", "validate", "validate_tools",
]
