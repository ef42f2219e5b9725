"""One typed, frozen config tree. YAML is data; `key=value` overrides; validate() lists every
problem at once, each with its key path, before any actor starts.

    schema.py    the dataclasses: Config and its sections, the sandbox, tool-server and logging settings
    load.py      load_config (YAML + dotted overrides, typed), save_resolved
    validate.py  validate(cfg) and the checks the sandbox, tool client and tool server share
    dotted.py    resolve_dotted: user code named by `pkg.module:attr`, imported once per process
    engine_registry.py  ENGINES: every rollout engine's name, class path and capability record
    verdicts.py  VERDICT_PARSERS: the judge's built-in verdict parsers, each declared with its name
"""

from relay.config.dotted import check_dotted, resolve_dotted
from relay.config.engine_registry import ENGINES, EngineCapabilities, EngineEntry, engine_import_error
from relay.config.load import load_config, save_resolved
from relay.config.reward_model import JudgeConfig, RewardModelConfig
from relay.config.schema import (
    LOGGERS_EXTRA,
    TOOL_PARSERS,
    WANDB_MODES,
    AlgorithmConfig,
    CheckpointConfig,
    Config,
    ConfigError,
    CriticConfig,
    LoggingConfig,
    ModelConfig,
    ResourcesConfig,
    RoleResources,
    RolloutConfig,
    RunConfig,
    SandboxConfig,
    SandboxMode,
    TaskConfig,
    ToolsConfig,
    ToolServerConfig,
    TrainingConfig,
)
from relay.config.validate import (
    validate,
    validate_logging,
    validate_sandbox_limits,
    validate_tool_client,
    validate_tool_server,
    validate_tools,
)

__all__ = [
    "LOGGERS_EXTRA",
    "TOOL_PARSERS",
    "WANDB_MODES",
    "AlgorithmConfig",
    "CheckpointConfig",
    "Config",
    "ENGINES",
    "ConfigError",
    "CriticConfig",
    "EngineCapabilities",
    "EngineEntry",
    "JudgeConfig",
    "LoggingConfig",
    "ModelConfig",
    "ResourcesConfig",
    "RewardModelConfig",
    "RoleResources",
    "RolloutConfig",
    "RunConfig",
    "SandboxConfig",
    "SandboxMode",
    "TaskConfig",
    "ToolServerConfig",
    "ToolsConfig",
    "TrainingConfig",
    "check_dotted",
    "engine_import_error",
    "load_config",
    "resolve_dotted",
    "save_resolved",
    "validate",
    "validate_logging",
    "validate_sandbox_limits",
    "validate_tool_client",
    "validate_tool_server",
    "validate_tools",
]
