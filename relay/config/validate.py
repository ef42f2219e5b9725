"""Every check of the config tree, each problem naming its key path, all run before any actor
starts. The sandbox, the tool client and the tool server run the same checks on the settings
they are given directly (library use), so a check is written once."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import get_args
from urllib.parse import urlsplit

from relay.config.bfcl import validate_bfcl
from relay.config.dotted import check_dotted, resolve_dotted
from relay.config.elastic import count_problems, starting_count, validate_elastic
from relay.config.engine_registry import cannot, capabilities, engine_import_error
from relay.config.health import validate_health
from relay.config.roles import validate_followers
from relay.config.schema import (
    LOGGERS_EXTRA,
    TOOL_PARSERS,
    WANDB_MODES,
    Config,
    LoggingConfig,
    RoleResources,
    SandboxConfig,
    SandboxMode,
    ToolsConfig,
    ToolServerConfig,
)
from relay.config.sft import TASK_DEMONSTRATIONS, validate_sft
from relay.config.validate_algorithm import validate_algorithm
from relay.config.validate_endpoint import validate_endpoint
from relay.config.validate_pipeline import validate_colocate, validate_pipeline
from relay.config.validate_reward_model import validate_reward_model
from relay.config.validate_task import validate_task, validate_tool_task


def validate(cfg: Config) -> list[str]:
    """Every value and cross-field problem, each naming its key path."""
    p: list[str] = []

    def need(cond: bool, msg: str):
        if not cond:
            p.append(msg)

    t, r, a, res = cfg.training, cfg.rollout, cfg.algorithm, cfg.resources
    p += validate_run(cfg)
    need(
        t.steps >= 1 or (t.steps == 0 and cfg.sft.steps > 0),
        f"training.steps: must be >= 1 (or 0 with sft.steps > 0: the supervised stage alone), got {t.steps}",
    )
    need(t.prompts_per_step >= 1, f"training.prompts_per_step: must be >= 1, got {t.prompts_per_step}")
    need(t.lr > 0, f"training.lr: must be > 0, got {t.lr}")
    need(t.grad_clip > 0, f"training.grad_clip: must be > 0, got {t.grad_clip}")
    need(t.ppo_epochs >= 1, f"training.ppo_epochs: must be >= 1, got {t.ppo_epochs}")
    need(t.mini_batches >= 1, f"training.mini_batches: must be >= 1, got {t.mini_batches}")
    need(t.micro_batch_size >= 1, f"training.micro_batch_size: must be >= 1, got {t.micro_batch_size}")
    need(t.eval_every >= 0, f"training.eval_every: must be >= 0, got {t.eval_every}")
    need(r.n >= 1, f"rollout.n: must be >= 1, got {r.n}")
    need(r.temperature > 0, f"rollout.temperature: must be > 0, got {r.temperature}")
    need(0 < r.top_p <= 1, f"rollout.top_p: must be in (0, 1], got {r.top_p}")
    need(r.top_k == -1 or r.top_k >= 1, f"rollout.top_k: must be -1 (off) or >= 1, got {r.top_k}")
    need(r.max_new_tokens >= 1, f"rollout.max_new_tokens: must be >= 1, got {r.max_new_tokens}")
    p += validate_algorithm(cfg)
    need(cfg.critic.lr > 0, f"critic.lr: must be > 0, got {cfg.critic.lr}")
    need(cfg.critic.clip_range > 0, f"critic.clip_range: must be > 0, got {cfg.critic.clip_range}")
    need(a.kl_target > 0, f"algorithm.kl_target: must be > 0, got {a.kl_target}")
    need(a.kl_horizon >= 1, f"algorithm.kl_horizon: must be >= 1, got {a.kl_horizon}")
    if a.kl_controller == "adaptive" and a.kl_in != "reward":
        p.append("algorithm.kl_controller=adaptive adjusts a KL penalty in the reward: set algorithm.kl_in=reward")
    if a.kl_controller == "adaptive" and a.kl_coef == 0:
        p.append(
            "algorithm.kl_controller=adaptive starts from algorithm.kl_coef, which is 0: set an initial coefficient > 0"
        )
    need(
        a.dynamic_sampling_max_tries >= 1,
        f"algorithm.dynamic_sampling_max_tries: must be >= 1, got {a.dynamic_sampling_max_tries}",
    )
    if a.dynamic_sampling and r.n < 2:
        p.append(f"algorithm.dynamic_sampling needs groups: rollout.n must be >= 2, got {r.n}")
    need(
        0 <= a.overlong_buffer_len < r.max_new_tokens or a.overlong_buffer_len == 0,
        f"algorithm.overlong_buffer_len: must be in [0, rollout.max_new_tokens={r.max_new_tokens}), got {a.overlong_buffer_len}",
    )
    need(a.overlong_penalty >= 0, f"algorithm.overlong_penalty: must be >= 0, got {a.overlong_penalty}")
    need(res.max_restarts >= -1, f"resources.max_restarts: must be >= -1 (-1: no limit), got {res.max_restarts}")
    need(res.call_timeout_s > 0, f"resources.call_timeout_s: must be > 0, got {res.call_timeout_s}")
    need(res.rollout_timeout_s > 0, f"resources.rollout_timeout_s: must be > 0, got {res.rollout_timeout_s}")
    need(res.update_timeout_s > 0, f"resources.update_timeout_s: must be > 0, got {res.update_timeout_s}")
    need(res.placement_timeout_s > 0, f"resources.placement_timeout_s: must be > 0, got {res.placement_timeout_s}")
    need(res.learner_restores >= 0, f"resources.learner_restores: must be >= 0, got {res.learner_restores}")
    need(res.auto_resume >= 0, f"resources.auto_resume: must be >= 0, got {res.auto_resume}")
    for role in ("rollout", "learner", "reference", "critic", "env"):
        rr: RoleResources = getattr(res, role)
        p += count_problems(f"resources.{role}.count", rr.count)  # rollout's may be a range {min, max}
        need(rr.cpus > 0, f"resources.{role}.cpus: must be > 0, got {rr.cpus}")
        need(rr.gpus >= 0, f"resources.{role}.gpus: must be >= 0, got {rr.gpus}")
        need(
            rr.node_resource is None
            or (
                rr.node_resource.strip() != ""
                and rr.node_resource not in ("CPU", "GPU", "memory", "object_store_memory")
            ),
            f"resources.{role}.node_resource: must name a custom resource (not CPU, GPU or memory), got {rr.node_resource!r}",
        )
    p += validate_sharding(cfg)
    p += validate_colocate(cfg)
    p += validate_lora(cfg)
    p += validate_pipeline(cfg)
    p += validate_elastic(cfg)
    p += validate_followers(cfg)
    if not count_problems("", res.rollout.count) and t.prompts_per_step % starting_count(res.rollout.count):
        p.append(
            f"training.prompts_per_step={t.prompts_per_step} does not divide among resources.rollout.count={res.rollout.count} workers"
        )
    batch = t.prompts_per_step * r.n
    if t.mini_batches >= 1 and batch % t.mini_batches:
        p.append(
            f"training.mini_batches={t.mini_batches} does not divide the rollout batch of {batch} samples (training.prompts_per_step x rollout.n)"
        )
    need(
        t.stop_after_failed_steps >= 0,
        f"training.stop_after_failed_steps: must be >= 0, got {t.stop_after_failed_steps}",
    )
    c = cfg.checkpoint
    need(c.every >= 0, f"checkpoint.every: must be >= 0, got {c.every}")
    need(
        c.keep_last_n >= 1,
        f"checkpoint.keep_last_n: must be >= 1 (the newest checkpoint is always kept), got {c.keep_last_n}",
    )
    task = cfg.task
    p += validate_task(task)
    p += validate_tool_task(task, cfg.tools)
    p += validate_bfcl(task, cfg.tools)
    env_class = resolve_dotted(task.env) if task.env and check_dotted(task.env) is None else None
    p += validate_sft(cfg.sft, task.name, env_class)
    need(
        not task.demonstrated_shapes or (cfg.sft.steps > 0 and cfg.sft.data == TASK_DEMONSTRATIONS),
        "task.demonstrated_shapes: picks the task's own demonstrations, so it needs sft.steps > 0 and "
        f"sft.data: {TASK_DEMONSTRATIONS}; got sft.steps={cfg.sft.steps}, sft.data={cfg.sft.data}",
    )
    need(r.max_turns >= 1, f"rollout.max_turns: must be >= 1, got {r.max_turns}")
    need(
        r.max_live_episodes >= 0,
        f"rollout.max_live_episodes: must be >= 0 (0: all of a call's episodes at once), got {r.max_live_episodes}",
    )
    need(
        r.max_tokens_per_turn is None or r.max_tokens_per_turn >= 1,
        f"rollout.max_tokens_per_turn: must be >= 1 or null, got {r.max_tokens_per_turn}",
    )
    if cfg.tools.enabled or cfg.task.env is not None:
        need(
            task.prompt_format != "raw",
            "task.prompt_format: raw has no chat template to place tool results and observations in; "
            "multi-turn tasks (tools.enabled, task.env) need chat or auto",
        )
        need(
            r.max_total_tokens >= (r.max_tokens_per_turn or r.max_new_tokens),
            f"rollout.max_total_tokens: must be >= one turn's tokens ({r.max_tokens_per_turn or r.max_new_tokens}), got {r.max_total_tokens}",
        )
    p += validate_tools(cfg)
    p += validate_endpoint(cfg)
    p += validate_reward_model(cfg)
    p += validate_health(cfg.health)
    p += validate_logging(cfg.logging)
    if cfg.model.path != "tiny" and cfg.model.path.startswith(("/", ".", "~")):
        need(Path(cfg.model.path).expanduser().exists(), f"model.path: no such folder or GGUF file: {cfg.model.path}")
    err = engine_import_error(r.engine)
    need(err is None, f"rollout.engine: {err}")
    if capabilities(r.engine).gpu_only:
        need(
            res.rollout.gpus > 0,
            f"rollout.engine: the {r.engine} engine runs on GPUs only: set resources.rollout.gpus > 0, got {res.rollout.gpus}",
        )
    return p


def validate_lora(cfg: Config) -> list[str]:
    """model.lora.* values (their target modules are checked against the model by relay.models.lora,
    when the driver resolves model.path) and checkpoint.save_merged."""
    lora, p = cfg.model.lora, []
    if lora.rank < 0:
        p.append(f"model.lora.rank: must be >= 0 (0: full fine-tuning), got {lora.rank}")
    if not lora.alpha > 0:
        p.append(f"model.lora.alpha: must be > 0, got {lora.alpha}")
    if not 0 <= lora.dropout < 1:
        p.append(f"model.lora.dropout: must be in [0, 1), got {lora.dropout}")
    if lora.rank > 0 and not lora.target_modules:
        p.append("model.lora.target_modules: empty; name module names (e.g. q_proj) or 'all-linear'")
    engine = cfg.rollout.engine
    max_rank = capabilities(engine).max_lora_adapter_rank
    if lora.rank > 0 and lora.sync == "adapter" and max_rank == 0:
        serves = lambda can: can.max_lora_adapter_rank > 0
        p.append(cannot("model.lora.sync", engine, "serve LoRA adapters", serves) + "; it takes merged weights (use auto or merged)")
    if 0 < max_rank < lora.rank and lora.sends_adapters(engine):
        p.append(f"model.lora.rank: the {engine} engine serves adapters up to rank {max_rank}; use model.lora.sync=merged")
    if cfg.checkpoint.save_merged and lora.rank <= 0:
        p.append("checkpoint.save_merged: only with model.lora.rank > 0 (without LoRA final_model is the whole model)")
    return p


def validate_sharding(cfg: Config) -> list[str]:
    """The learning-rate schedule, micro-batching and the rank groups of learner, reference, critic."""
    t, res, p = cfg.training, cfg.resources, []
    if t.lr_schedule not in ("constant", "linear", "cosine"):
        p.append(f"training.lr_schedule: {t.lr_schedule!r} is not one of ['constant', 'linear', 'cosine']")
    if t.warmup_steps < 0:
        p.append(f"training.warmup_steps: must be >= 0, got {t.warmup_steps}")
    if not 0 <= t.min_lr_ratio <= 1:
        p.append(f"training.min_lr_ratio: must be in [0, 1], got {t.min_lr_ratio}")
    if t.max_tokens_per_micro_batch < 0:
        p.append(
            f"training.max_tokens_per_micro_batch: must be >= 0 (0: micro_batch_size rows), got {t.max_tokens_per_micro_batch}"
        )
    if t.mixed_precision not in ("none", "bf16"):
        p.append(f"training.mixed_precision: {t.mixed_precision!r} is not one of ['none', 'bf16']")
    for role in ("learner", "reference", "critic"):
        rr: RoleResources = getattr(res, role)
        if rr.count > 1 and 0 < rr.gpus < 1:
            p.append(
                f"resources.{role}.gpus={rr.gpus} with count={rr.count}: the ranks of a group hold whole GPUs "
                "(NCCL cannot put two ranks on one GPU) or none"
            )
        if t.cpu_offload and rr.gpus == 0 and role == "learner":
            p.append("training.cpu_offload offloads GPU ranks' state to the host: set resources.learner.gpus >= 1")
    return p


def validate_run(cfg: Config) -> list[str]:
    """run.name is one folder name; run.output_dir can be created and written, checked now rather
    than after Ray and the actors have started."""
    p, name = [], cfg.run.name
    if not name.strip() or name in (".", "..") or any(c in name for c in ("/", "\\", "\0", os.sep)):
        p.append(f"run.name: must be one folder name (no path separators, not '.' or '..'), got {name!r}")
    out = Path(cfg.run.output_dir).expanduser()
    existing = out
    while not existing.exists() and existing.parent != existing:  # where the folders would be created
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        p.append(f"run.output_dir: {existing} is a file, not a folder (output_dir is {cfg.run.output_dir})")
    elif existing.exists() and not os.access(existing, os.W_OK | os.X_OK):
        p.append(f"run.output_dir: cannot write to {existing} (output_dir is {cfg.run.output_dir})")
    return p


def validate_tools(cfg: Config) -> list[str]:
    """tools.*: the parser, the sandbox, the client knobs, the tool functions, the executors."""
    tl, p = cfg.tools, []
    if not tl.enabled:
        return p
    if tl.parser not in TOOL_PARSERS:
        p.append(f"tools.parser: {tl.parser!r} is not one of {sorted(TOOL_PARSERS)}")
    if tl.sandbox not in get_args(SandboxMode):
        p.append(f"tools.sandbox: {tl.sandbox!r} is not one of {list(get_args(SandboxMode))}")
    if tl.max_tool_turns < 0:
        p.append(f"tools.max_tool_turns: must be >= 0, got {tl.max_tool_turns}")
    if tl.max_calls_per_turn < 1:
        p.append(f"tools.max_calls_per_turn: must be >= 1, got {tl.max_calls_per_turn}")
    p += validate_tool_client(tl)
    p += validate_sandbox_limits(tl.sandbox_limits, "tools.sandbox_limits.")
    for i, dotted in enumerate(tl.functions):
        err = check_dotted(dotted)
        if err is not None:
            p.append(f"tools.functions[{i}]: {err}")
    if tl.executors.count < 1:
        p.append(f"tools.executors.count: must be >= 1, got {tl.executors.count}")
    if not tl.executors.cpus > 0:
        p.append(f"tools.executors.cpus: must be > 0, got {tl.executors.cpus}")
    return p


def validate_tool_client(tl: ToolsConfig) -> list[str]:
    """What relay.tools.client.ToolClient reads: tools.server_url (when set) and the client knobs."""
    p = []
    if tl.server_url is not None:
        parts = urlsplit(tl.server_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            p.append(f"tools.server_url: must be http(s)://host:port, got {tl.server_url!r}")
    for key in ("max_retries", "retry_delay", "request_interval"):
        if getattr(tl, key) < 0:
            p.append(f"tools.{key}: must be >= 0, got {getattr(tl, key)}")
    for key in ("timeout", "max_workers", "max_body_bytes"):
        if not getattr(tl, key) > 0:
            p.append(f"tools.{key}: must be > 0, got {getattr(tl, key)}")
    return p


def validate_sandbox_limits(limits: SandboxConfig, prefix: str = "sandbox_limits.") -> list[str]:
    """The limits of one sandboxed run; `prefix` is where they sit ("tools.sandbox_limits.")."""
    p = []
    for key in (
        "wall_timeout_s",
        "cpu_seconds",
        "memory_mb",
        "max_pids",
        "max_output_bytes",
        "tmpfs_mb",
        "max_open_files",
        "file_size_mb",
        "max_code_bytes",
    ):
        if not getattr(limits, key) > 0:
            p.append(f"{prefix}{key}: must be > 0, got {getattr(limits, key)!r}")
    if limits.cpu_cores < 0:
        p.append(f"{prefix}cpu_cores: must be >= 0, got {limits.cpu_cores!r}")
    if limits.max_pids < 4:
        p.append(f"{prefix}max_pids: must be >= 4 (bwrap and python use two), got {limits.max_pids!r}")
    return p


def validate_tool_server(cfg: ToolServerConfig) -> list[str]:
    """The tool server's settings (python -m relay.tools.server flags, or ToolExecutor.start_server)."""
    p = []
    if cfg.sandbox not in get_args(SandboxMode):
        p.append(f"sandbox: {cfg.sandbox!r} is not one of {list(get_args(SandboxMode))}")
    if not 0 <= cfg.port <= 65535:
        p.append(f"port: must be in [0, 65535], got {cfg.port}")
    for key in ("max_concurrency", "max_waiting", "max_connections"):
        if getattr(cfg, key) < 0:
            p.append(f"{key}: must be >= 0, got {getattr(cfg, key)}")
    for key in ("max_waiting_per_client", "max_body_bytes", "read_timeout_s", "socket_timeout_s"):
        if not getattr(cfg, key) > 0:
            p.append(f"{key}: must be > 0, got {getattr(cfg, key)}")
    return p + validate_sandbox_limits(cfg.sandbox_limits)


def validate_logging(lg: LoggingConfig) -> list[str]:
    """logging.*: the enabled loggers' packages are importable, so a missing one fails here and
    not after every actor has loaded a model."""
    p = []
    if lg.console_every < 1:
        p.append(f"logging.console_every: must be >= 1, got {lg.console_every}")
    if lg.samples_every < 0:
        p.append(f"logging.samples_every: must be >= 0 (0: no sample files), got {lg.samples_every}")
    if lg.samples_per_write < 1:
        p.append(f"logging.samples_per_write: must be >= 1, got {lg.samples_per_write}")
    if lg.wandb and lg.wandb_mode not in WANDB_MODES:
        p.append(f"logging.wandb_mode: {lg.wandb_mode!r} is not one of {list(WANDB_MODES)}")
    for key in ("tensorboard", "wandb", "mlflow"):
        if getattr(lg, key) and not _importable(key):
            p.append(
                f"logging.{key}: the `{key}` package is not installed: pip install '{LOGGERS_EXTRA}' "
                f"(or set logging.{key}=false)"
            )
    return p


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package fails, or a module without a spec
        return False
