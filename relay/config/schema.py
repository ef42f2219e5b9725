"""The typed, frozen config tree: every setting relay reads, with its default.

`Config` is the tree the driver loads (relay.config.load) and checks (relay.config.validate).
The tool server's settings (`ToolServerConfig`) share its sandbox types; the sandbox, the tool
client, the loggers and the agent loop read their settings from these classes, so each setting
has one name and one default.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from relay.config.bfcl import BfclFields
from relay.config.dotted import dotted_name
from relay.config.elastic import RolloutResources
from relay.config.endpoint import EndpointConfig
from relay.config.engine_registry import EngineName
from relay.config.health import HealthConfig
from relay.config.model import ModelConfig
from relay.config.reasoning_gym import ReasoningGymFields
from relay.config.resources import FollowerResources, RoleResources
from relay.config.reward_model import RewardModelConfig
from relay.config.sft import SftConfig
from relay.config.textarena import TextArenaFields
from relay.config.tool_tasks import TOOL_TASK_TOOLS


class ConfigError(ValueError):
    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("invalid config:\n" + "\n".join(f"  - {p}" for p in problems))

    def __reduce__(self):  # rebuilt from the list when it crosses a Ray task boundary
        return ConfigError, (self.problems,)


# bwrap: the bubblewrap sandbox (relay/tools/sandbox/); none: model code runs UNSANDBOXED (loud warning).
SandboxMode = Literal["bwrap", "none"]
# The names relay.tools.parsers.PARSERS answers to (a unit test keeps the two equal).
TOOL_PARSERS = ("tag", "hermes", "json", "react", "function_call", "pythonic")
TOOL_PARSERS += ("qwen3_coder", "harmony", "openai", "llama3_json", "mistral")  # relay/tools/model_parsers.py
WANDB_MODES = ("online", "offline", "disabled", "shared")
LOGGERS_EXTRA = "relay[loggers]"  # the pip extra with tensorboard, wandb and mlflow


@dataclass(frozen=True)
class RunConfig:
    name: str = "tiny-grpo"
    output_dir: str = "runs"
    seed: int = 0


@dataclass(frozen=True)
class TaskConfig(ReasoningGymFields, TextArenaFields, BfclFields):  # their fields: relay/config/<task>.py
    # built-in (arithmetic, chat_arithmetic, a tool task, reasoning_gym, textarena, bfcl), or "custom"
    name: str = "arithmetic"
    train_file: str | None = None  # JSONL / Parquet rows: prompt or messages, plus ground_truth
    eval_file: str | None = None
    prompt_key: str = "prompt"
    answer_key: str = "ground_truth"
    # Dotted path to a function of (trajectory), (trajectory, environment) or (sample, env) (relay/envs/trajectory.py).
    # None: the step rewards' sum with task.env, the agent's own with task.agent, else the exact-answer check.
    # From Python (relay.ConfigStore, RayPPOTrainer) env and reward_fn may be the class and function themselves.
    reward_fn: str | Callable[..., Any] | None = None
    env: str | Callable[..., Any] | None = None  # dotted path to an Environment class (multi-turn)
    agent: str | None = None  # dotted path to an agent program run(client, row) (relay/config/endpoint.py)
    env_config: dict[str, Any] = field(default_factory=dict)  # the environment's constructor argument
    success_threshold: float = 1.0  # environment tasks: an episode whose reward reaches it is a success
    # Where rewards are computed: false, in the rollout worker that made the samples; true, on EnvPool
    # actors even without task.env (a heavy reward function then holds its memory once per pool).
    reward_actor: bool = False
    system_prompt: str | None = None
    # chat: the tokenizer's chat template; raw: the prompt text as is (base models); auto: chat if it has one.
    prompt_format: Literal["chat", "raw", "auto"] = "auto"
    digits: int = 2  # built-in arithmetic: operand size
    ops: str = "+-*"  # chat_arithmetic (relay/envs/chat_arithmetic.py): operations, operands in [min, max]
    operand_min: int = 2
    operand_max: int = 20
    worked_example: bool = False  # tool_chain: one whole two-call episode in the system prompt
    nudge: float = 0.0  # tool_chain: share of a training group whose lookup reply names the next step
    # chat_tool: the supervised stage's demonstrations ask only these shapes (CHAT_TOOL_SHAPES); empty: all
    demonstrated_shapes: list[str] = field(default_factory=list)
    num_train_rows: int = 50_000
    num_eval_rows: int = 256

    @property
    def reward_fn_path(self) -> str | Callable[..., Any]:
        if self.reward_fn is not None:
            return self.reward_fn
        if self.env:
            return "relay.envs.base:episode_return"
        if self.agent:
            return "relay.endpoint.samples:agent_reward"
        if self.name == "reasoning_gym":  # the dataset's own score_answer
            if not self.partial_credit:
                return "relay.envs.reasoning_gym:reasoning_gym_reward_exact"
            return "relay.envs.reasoning_gym:reasoning_gym_reward"
        if self.name == "bfcl":  # BFCL's own AST checker on the parsed calls
            return "relay.envs.bfcl:bfcl_reward"
        if self.name == "chat_arithmetic":  # the last integer of the final turn
            return "relay.envs.chat_arithmetic:chat_arithmetic_reward"
        if self.name in TOOL_TASK_TOOLS:  # the same, of an answer turn the model ended itself
            return "relay.envs.tool_tasks:tool_answer_reward"
        return "relay.envs.arithmetic:arithmetic_reward"


@dataclass(frozen=True)
class RolloutConfig:
    engine: EngineName = "hf"  # relay/config/engine_registry.py ENGINES
    n: int = 8  # samples per prompt (the GRPO group)
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_new_tokens: int = 8
    stop: tuple[str, ...] = ()
    engine_kwargs: dict[str, Any] = field(default_factory=dict)  # passed to the engine untouched
    # Multi-turn (tools.enabled or task.env): the agent loop's limits (relay/agent/loop.py).
    max_turns: int = 4  # model turns per episode
    max_tokens_per_turn: int | None = None  # None: max_new_tokens
    max_total_tokens: int = 512  # response tokens per episode, model and observation tokens together
    # Continuous batching (relay/agent/loop.py AgentLoop.stream): at most this many episodes in one
    # generate call; as a group's episodes end, the call's next prompts start in their place.
    # 0: every episode of a rollout call at once (one batch, waiting for its slowest episode).
    max_live_episodes: int = 0
    # Partial rollouts (docs/pipeline.md): with training.mode one_step_off or async, weights that
    # arrive mid-call are loaded between two chunks of partial_chunk new tokens (or two turns) and
    # generation goes on with them; every token records the version that sampled it
    # (Sample.token_versions). Needs algorithm.tis_cap (not 0) and an engine that can (partial_rollouts).
    partial: bool = False
    partial_chunk: int = 16
    # Engine sleep after each rollout (vLLM level 1, SGLang memory release): a learner on the same GPU
    # gets the KV cache's memory until the next weight sync. None: on when both hold GPU fractions.
    sleep_while_training: bool | None = None


@dataclass(frozen=True)
class SandboxConfig:
    """The limits of one sandboxed run of model-written code (relay/tools/sandbox/). They come
    only from here (tools.sandbox_limits, or the tool server's sandbox_limits), never from a tool call."""

    wall_timeout_s: float = 10.0
    cpu_seconds: int = 5  # per process (RLIMIT_CPU): SIGKILL at the limit
    memory_mb: int = 256  # cgroup memory (+swap) of the whole run, and RLIMIT_AS of each process
    max_pids: int = 32  # processes + threads of the whole run (bwrap's two included)
    max_output_bytes: int = 64 * 1024  # per stream (stdout, stderr); the rest is counted and dropped
    tmpfs_mb: int = 16  # size of each writable tmpfs: /tmp, /sandbox, /dev/shm
    max_open_files: int = 64
    file_size_mb: int = 8  # RLIMIT_FSIZE: the largest file the code may write
    cpu_cores: float = 1.0  # cgroup CPU quota of the whole run (0: no quota)
    max_code_bytes: int = 1024 * 1024
    python: str = "/usr/bin/python3"  # it, its stdlib and shared libraries are all the host the sandbox sees
    ro_binds: tuple[str, ...] = ()  # extra host paths bound read-only in place (bwrap reads them as uid 65534)


@dataclass(frozen=True)
class ToolsConfig:
    """Tool calls in the agent loop (relay/agent/loop.py): parser, sandbox, executors or tool server.
    With server_url, relay.tools.client reads the client settings (max_retries ... request_interval) here too."""

    enabled: bool = False
    parser: str = "tag"  # one of TOOL_PARSERS: tag | hermes | json | react | function_call | qwen3_coder | ...
    sandbox: SandboxMode = "bwrap"  # none: model code runs UNSANDBOXED (loud warning)
    # Each sandboxed run: wall_timeout_s, cpu_seconds, memory_mb, max_pids, max_output_bytes (per
    # stream; the model reads every byte, and the tool client cuts a server's output there too), ...
    sandbox_limits: SandboxConfig = SandboxConfig()
    server_url: str | None = None  # an HTTP tool server (python -m relay.tools.server); None: ToolExecutor actors
    functions: tuple[str, ...] = ()  # extra tools: dotted paths of typed Python functions
    schemas_in_prompt: bool = True  # pass the tool schemas to the chat template (tools=...)
    max_tool_turns: int = 3  # model turns that may call tools, per episode
    max_calls_per_turn: int = 16  # tool calls run per model turn; the rest are one error the model reads
    max_retries: int = 3  # tool server only: retries where the server never answered
    retry_delay: float = 1.0  # tool server only: seconds before the first retry; doubles each time
    timeout: float = 30.0  # tool server only: seconds per call, retries included
    max_workers: int = 8  # tool calls run at once per executor (or per rollout worker's client)
    request_interval: float = 0.0  # tool server only: seconds between request starts
    # tool server only: a larger request body is refused by the client, never sent (the server would 413)
    max_body_bytes: int = 2 * 1024 * 1024
    executors: FollowerResources = FollowerResources(count=1, cpus=0.25)  # ToolExecutor actors (no server_url)


@dataclass(frozen=True)
class ToolServerConfig:
    """`python -m relay.tools.server` (or a ToolExecutor serving its sandbox): the same sandbox
    and sandbox_limits as tools.*, plus the server's own settings."""

    host: str = "127.0.0.1"
    port: int = 30003  # 0: any free port (see ToolServer.url)
    sandbox: SandboxMode = "bwrap"
    sandbox_limits: SandboxConfig = SandboxConfig()
    # Sandboxes running at once; 0: two per CPU core (a run is mostly kernel set-up, not CPU:
    # benchmarks/tool_throughput.py). Each slot may hold sandbox_limits.memory_mb of memory.
    max_concurrency: int = 0
    max_waiting: int = 1024  # requests waiting for a slot beyond this get 429 (decided before the body is read)
    # One client's waiting requests (a ToolClient, named by its X-Relay-Client header, else the
    # peer address); beyond this it gets 429 while other clients are still admitted.
    max_waiting_per_client: int = 256
    # Connections (one handler thread each) at once; past this a new one gets 429 at once.
    # 0: slots + max_waiting + 64.
    max_connections: int = 0
    max_body_bytes: int = 2 * 1024 * 1024
    read_timeout_s: float = 10.0  # deadline for a request's head and body to arrive (else 408)
    socket_timeout_s: float = 60.0  # a client that stops reading the answer is dropped


@dataclass(frozen=True)
class AlgorithmConfig:
    # One module each, named by the value: relay/algos/estimators/<estimator>.py, policy_losses/<policy_loss>.py.
    # Its hyperparameters go in *_args by name, except the shared ones below (clip_low ... dual_clip_c, gamma, lam).
    estimator: str = "grpo"
    estimator_args: dict[str, Any] = field(default_factory=dict)  # e.g. {eps: 1.0e-6} for grpo
    policy_loss: str = "ppo"
    policy_loss_args: dict[str, Any] = field(default_factory=dict)  # e.g. {eps_high_is: 4.0} for cispo
    loss_agg: str = "token-mean"  # relay.algos.registry.AGG_MODES
    clip_low: float = 0.2  # ppo, dual_clip, gspo: r clipped to [1 - clip_low, 1 + clip_high]
    clip_high: float = 0.2  # > clip_low is DAPO's clip-higher
    dual_clip_c: float = 3.0  # dual_clip: for A < 0 the loss is at most -A * dual_clip_c
    kl_coef: float = 0.0  # 0 with kl_in=loss/reward: no KL term, no reference actor
    kl_estimator: str = "k3"  # k1, k2, k3: relay.algos.kl.KL_ESTIMATORS
    kl_in: Literal["loss", "reward"] = "loss"
    entropy_coef: float = 0.0
    gamma: float = 1.0  # gae, reinforce_plus_plus*: the discount per model token
    lam: float = 1.0  # gae's lambda
    # Truncated IS: each token weighted by min(pi_learner / pi_rollout, tis_cap) (engine mismatch, stale
    # samples). null: 2.0 where samples are stale (training.mode one_step_off / async), off in sync; 0: off.
    tis_cap: float | None = None
    kl_controller: Literal["fixed", "adaptive"] = "fixed"  # adaptive: Ziegler et al. 2019, for kl_in=reward
    kl_target: float = 0.1
    kl_horizon: int = 10_000
    dynamic_sampling: bool = False  # DAPO (Yu et al. 2025): drop groups whose rewards are all equal, draw more
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
    # Learning rate over optimizer steps (relay/update/lr_schedule.py): linear warm-up over warmup_steps,
    # then constant, or linear / cosine decay to lr * min_lr_ratio at the last optimizer step.
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    warmup_steps: int = 0  # optimizer steps (steps x ppo_epochs x mini_batches in all)
    min_lr_ratio: float = 0.0
    # > 0: micro-batches hold about this many real tokens each (rows grouped by length, padding
    # columns trimmed) instead of micro_batch_size rows; the update is the same up to float error.
    max_tokens_per_micro_batch: int = 0
    # bf16: bf16 matmuls, fp32 master weights, optimizer state and reductions; one actor under autocast
    # (relay/update/precision.py), a rank group by FSDP2's MixedPrecisionPolicy.
    mixed_precision: Literal["none", "bf16"] = "none"
    # Sharded learner / reference / critic (FSDP2, relay/update/fsdp.py). cpu_offload, or a role's
    # resources.*.count > 1, makes that role a rank group.
    activation_checkpointing: bool = False  # recompute each decoder layer's activations in the backward pass
    cpu_offload: bool = False  # parameters, gradients and optimizer state on the host (CPUOffloadPolicy; GPU ranks)
    eval_before: bool = True  # the held-out evaluation before training; off: a faster start, before-values NaN
    # Stop (relay/failures.py) after this many steps in a row that were all failures: every episode an
    # environment error, every reward an error, or every optimizer step skipped (non-finite). 0: never.
    stop_after_failed_steps: int = 3
    # Rollout/training overlap (relay/run/pipeline.py). sync: roll out, then train. one_step_off: step k+1's
    # rollout runs while step k trains (samples one version stale). async: rollout calls of
    # groups_per_call prompts stay in flight and fill a bounded buffer; each step takes prompts_per_step
    # groups no older than max_staleness versions; older ones are dropped (stale_groups=drop) or their
    # prompts rolled out again (regenerate). Both count in rollout/dropped_stale.
    mode: Literal["sync", "one_step_off", "async"] = "sync"
    max_staleness: int = 1  # async: weight versions a trained sample may lag the update's
    stale_groups: Literal["drop", "regenerate"] = "drop"
    groups_per_call: int = 0  # async: prompts per rollout call; 0: prompts_per_step / rollout workers


@dataclass(frozen=True)
class ResourcesConfig:
    rollout: RolloutResources = RolloutResources(count=1, cpus=1.0)  # count may be a range: relay/config/elastic.py
    learner: RoleResources = RoleResources(count=1, cpus=1.0)
    reference: RoleResources = RoleResources(count=1, cpus=0.5)
    critic: RoleResources = RoleResources(count=1, cpus=0.5)
    env: FollowerResources = FollowerResources(count=1, cpus=0.25)
    reward_model: RoleResources = RoleResources(count=1, cpus=0.5)  # only with reward_model.path
    ray_address: str | None = None  # None: connect to RAY_ADDRESS if set, else start a local Ray
    dashboard: bool = False  # for a locally started Ray (about 1 GB RAM); clusters have their own
    # Learner -> rollout weights (relay_trainer/weights.py): object_store (CPU, any placement), broadcast
    # (one collective group: NCCL between whole GPUs, else gloo), auto = broadcast iff the learner
    # and the rollout workers each hold whole GPUs.
    weight_sync: Literal["auto", "object_store", "broadcast"] = "auto"
    # One actor is both learner and rollout worker (actors/colocated.py, verl's "hybrid engine"): the
    # HF engine generates from the learner's own module, so a weight sync is a version bump and one
    # process (one model, one torch) is saved. It takes resources.learner; resources.rollout is unused.
    # For training.mode sync with rollout.engine hf, one rollout worker and one learner actor.
    # null: colocated wherever that layout is possible, resources.weight_sync is auto and
    # resources.rollout.node_resource asks for no other node (validate_pipeline.with_layout; the
    # faster layout, docs/engines.md); false: a separate actor for each role.
    colocate: bool | None = None
    # Faults (actors/supervision.py). Rollout workers, env pools, tool executors, reward models and the
    # reference are restarted by Ray up to max_restarts times each (-1: no limit; 0: never); the call
    # that lost its actor is redone on the replacement. A call past its deadline kills its actor (then restarted):
    # call_timeout_s for environment, tool, scoring and weight calls, rollout_timeout_s for a
    # whole rollout shard and for a restarted actor to answer. Both far above a healthy call's time.
    # update_timeout_s: the learner's, reference's, critic's and reward model's passes over the whole
    # batch (logprobs, values, scores, the updates) and checkpoint save/load; past it the actor is
    # killed: a learner to be restored (learner_restores), a reference or reward model restarted,
    # a critic for good (the run stops as if it had died).
    max_restarts: int = 3
    call_timeout_s: float = 600.0
    rollout_timeout_s: float = 3600.0
    update_timeout_s: float = 3600.0
    # Seconds the roles' placement groups may wait for room at start-up (a full node, a node the
    # autoscaler adds); relay says after 20 s which ones wait and what is free, then stops past it.
    placement_timeout_s: float = 600.0
    # A learner that dies or hangs (one actor, or every rank of an FSDP group) is restarted by Ray and
    # restored in place (relay_trainer/learner_recovery.py): the last checkpoint, then the updates since it
    # replayed; no step lost or repeated. Up to learner_restores times per run (0: the run stops).
    learner_restores: int = 3
    # A learner out of restores, a critic, or an actor out of restarts that dies ends the run with its
    # last checkpoint and the --resume command; auto_resume: N resumes from it up to N times.
    auto_resume: int = 0


@dataclass(frozen=True)
class CheckpointConfig:
    every: int = 0  # steps between checkpoints; 0: only the last step
    keep_last_n: int = 2
    save_hf_model: bool = True  # final policy as a plain Hugging Face folder (with LoRA: a peft adapter folder)
    save_merged: bool = False  # with LoRA: also the merged model, a plain Hugging Face folder in final_model/merged
    # --resume when the newest checkpoint fails verification: false stops and names the newest one
    # that verifies; true resumes from that one (the failing ones are renamed corrupt-step_*).
    fallback: bool = False
    # SIGINT / SIGTERM (Ctrl-C, `ray job stop`): checkpoint the last finished step before stopping,
    # even when `every` does not make it due (false: keep only the checkpoints `every` writes).
    on_stop: bool = True


@dataclass(frozen=True)
class LoggingConfig:
    """Metric loggers (relay/run/loggers.py). TensorBoard, W&B and MLflow need `relay[loggers]`."""

    console: bool = True
    jsonl: bool = True
    tensorboard: bool = False
    wandb: bool = False
    wandb_project: str = "relay"
    wandb_mode: str = "offline"  # one of WANDB_MODES; offline: under run_dir/wandb, upload with `wandb sync`
    mlflow: bool = False
    mlflow_tracking_uri: str | None = None  # None: a SQLite store in run_dir (relay.run.loggers.MLflowLogger says why)
    mlflow_experiment: str = "relay"
    console_every: int = 10  # console lines: the first step, every this many steps, the last (a terminal: a bar too)
    # Whole episodes as text in run_dir/samples/step_XXXXXX.txt (prompt, turns, tool calls, observations, rewards,
    # finish reason) at the first step, every this many and the last; 0: none. `python -m relay.run.show` prints them.
    samples_every: int = 10
    samples_per_write: int = 4  # episodes per file


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
    reward_model: RewardModelConfig = RewardModelConfig()
    sft: SftConfig = SftConfig()
    endpoint: EndpointConfig = EndpointConfig()
    resources: ResourcesConfig = ResourcesConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    logging: LoggingConfig = LoggingConfig()
    health: HealthConfig = HealthConfig()  # the run-health monitor (relay/config/health.py, docs/health.md)

    def to_dict(self) -> dict[str, Any]:
        out = _plain(dataclasses.asdict(self))
        # The endpoint's token is a secret: config.yaml and the loggers' copies never hold it. None,
        # not a placeholder, so that a run started from that file makes a token of its own.
        out["endpoint"]["token"] = None
        return out


def _plain(x):
    if callable(x) and not isinstance(x, str):  # user code given as an object: named by its module and name
        return dotted_name(x)
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x
