"""What the training roles are started with: the config sections each reads, and the choices
resolved from several sections (relay/config/resolved.py), picked once from the whole tree where
the actors are made (relay_trainer/pools.py). A role holds these and nothing else of the config, so its
settings only ever flow down to it, and a test or benchmark builds one from any Config with `of`.
No actor and no engine is given the whole Config.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from relay.config.endpoint import EndpointConfig
from relay.config.resolved import old_logprobs_source, tis_cap
from relay.config.reward_model import RewardModelConfig
from relay.config.schema import (
    AlgorithmConfig,
    Config,
    CriticConfig,
    ModelConfig,
    RolloutConfig,
    TaskConfig,
    ToolsConfig,
    TrainingConfig,
)
from relay.config.sft import SftConfig
from relay.config.validate_reward_model import takes_rm_score


@dataclass(frozen=True)
class PolicySettings:
    """The Learner's, and the Reference's (the frozen policy: model, training, temperature)."""

    model: ModelConfig
    training: TrainingConfig
    algorithm: AlgorithmConfig
    seed: int  # run.seed
    temperature: float  # rollout.temperature: logprobs of the distribution the rollout sampled
    adapters_only: bool  # model.lora with rollout.engine: a weight sync sends the adapters alone
    tis_cap: float | None  # algorithm.tis_cap, its null resolved by training.mode
    old_logprobs: str  # where a step's old logprobs come from (resolved.old_logprobs_source)
    save_merged: bool  # checkpoint.save_merged: a LoRA run's final folder holds merged weights too
    sft: SftConfig  # the supervised stage's settings (its own optimizer)

    @classmethod
    def of(cls, cfg: Config) -> PolicySettings:
        return cls(
            model=cfg.model,
            training=cfg.training,
            algorithm=cfg.algorithm,
            seed=cfg.run.seed,
            temperature=cfg.rollout.temperature,
            adapters_only=cfg.model.lora.sends_adapters(cfg.rollout.engine),
            tis_cap=tis_cap(cfg),
            old_logprobs=old_logprobs_source(cfg),
            save_merged=cfg.checkpoint.save_merged,
            sft=cfg.sft,
        )


@dataclass(frozen=True)
class CriticSettings:
    """The Critic's: its own section, and the policy's model, training and advantages settings."""

    critic: CriticConfig
    model: ModelConfig
    training: TrainingConfig
    algorithm: AlgorithmConfig
    seed: int  # run.seed

    @classmethod
    def of(cls, cfg: Config) -> CriticSettings:
        return cls(
            critic=cfg.critic, model=cfg.model, training=cfg.training, algorithm=cfg.algorithm, seed=cfg.run.seed
        )


@dataclass(frozen=True)
class EngineSettings:
    """What relay.engines.make_engine reads: how the model loads, and the engine with its native options."""

    model: ModelConfig  # dtype, tokenizer_path, trust_remote_code, attn_implementation, lora
    engine: str  # rollout.engine
    engine_kwargs: dict[str, Any]  # rollout.engine_kwargs, passed to the engine untouched

    @classmethod
    def of(cls, cfg: Config) -> EngineSettings:
        return cls(model=cfg.model, engine=cfg.rollout.engine, engine_kwargs=cfg.rollout.engine_kwargs)

    @classmethod
    def judge(cls, cfg: Config) -> EngineSettings:
        """reward_model.judge's engine: the judge's own model, dtype, tokenizer and native options."""
        rm = cfg.reward_model
        model = dataclasses.replace(
            cfg.model, path=rm.path, tokenizer_path=None, dtype=rm.dtype, trust_remote_code=rm.trust_remote_code
        )
        return cls(model=model, engine=rm.judge.engine, engine_kwargs=rm.judge.engine_kwargs)


@dataclass(frozen=True)
class RolloutSettings:
    """The RolloutWorker's: its engine, the agent loop's sections, and the deadlines on its calls."""

    engine: EngineSettings
    rollout: RolloutConfig
    tools: ToolsConfig
    task: TaskConfig
    endpoint: EndpointConfig
    seed: int  # run.seed: each rollout's sampling seed derives from it
    call_timeout_s: float  # resources.call_timeout_s: env and tool calls
    rollout_timeout_s: float  # resources.rollout_timeout_s: the wait for a lost env pool's or executor's replacement

    @classmethod
    def of(cls, cfg: Config) -> RolloutSettings:
        res = cfg.resources
        return cls(
            engine=EngineSettings.of(cfg),
            rollout=cfg.rollout,
            tools=cfg.tools,
            task=cfg.task,
            endpoint=cfg.endpoint,
            seed=cfg.run.seed,
            call_timeout_s=res.call_timeout_s,
            rollout_timeout_s=res.rollout_timeout_s,
        )


@dataclass(frozen=True)
class ColocatedSettings:
    """The ColocatedWorker's: a learner's and a rollout worker's, in one actor (resources.colocate)."""

    policy: PolicySettings
    rollout: RolloutSettings

    @classmethod
    def of(cls, cfg: Config) -> ColocatedSettings:
        return cls(policy=PolicySettings.of(cfg), rollout=RolloutSettings.of(cfg))


@dataclass(frozen=True)
class RewardModelSettings:
    """A RewardModel actor's: its section, and the judge's engine (reward_model.kind judge)."""

    reward_model: RewardModelConfig
    judge_engine: EngineSettings | None

    @classmethod
    def of(cls, cfg: Config) -> RewardModelSettings:
        judge = EngineSettings.judge(cfg) if cfg.reward_model.kind == "judge" else None
        return cls(reward_model=cfg.reward_model, judge_engine=judge)


@dataclass(frozen=True)
class RewardPoolSettings:
    """The driver's RewardModelPool: how scores combine into rewards, and scoring's deadlines."""

    reward_model: RewardModelConfig
    reward_fn_path: str  # task.reward_fn_path
    takes_rm_score: bool  # the task's reward function combines rm_score itself
    call_timeout_s: float  # resources.call_timeout_s
    update_timeout_s: float  # resources.update_timeout_s: a hung reward model is killed and restarted

    @classmethod
    def of(cls, cfg: Config) -> RewardPoolSettings:
        res = cfg.resources
        return cls(
            reward_model=cfg.reward_model,
            reward_fn_path=cfg.task.reward_fn_path,
            takes_rm_score=takes_rm_score(cfg),
            call_timeout_s=res.call_timeout_s,
            update_timeout_s=res.update_timeout_s,
        )


@dataclass(frozen=True)
class ProducerSettings:
    """The RolloutProducer's (training.mode one_step_off and async)."""

    training: TrainingConfig
    partial: bool  # rollout.partial: each call names the weights it was made on
    rollout_timeout_s: float  # resources.rollout_timeout_s: a worker quiet this long is hung

    @classmethod
    def of(cls, cfg: Config) -> ProducerSettings:
        return cls(
            training=cfg.training, partial=cfg.rollout.partial, rollout_timeout_s=cfg.resources.rollout_timeout_s
        )


@dataclass(frozen=True)
class StepSettings:
    """The driver's step phases (relay_trainer/steps.py): how a batch is drawn, scored and trained on."""

    algorithm: AlgorithmConfig  # DAPO's dynamic sampling and overlong punishment
    prompts_per_step: int  # training.prompts_per_step
    group_size: int  # rollout.n: samples per prompt
    max_new_tokens: int  # rollout.max_new_tokens: where the overlong buffer ends
    games: bool  # task.name textarena: invalid moves are counted
    old_logprobs: str  # where a step's old logprobs come from (resolved.old_logprobs_source)

    @classmethod
    def of(cls, cfg: Config) -> StepSettings:
        return cls(
            algorithm=cfg.algorithm,
            prompts_per_step=cfg.training.prompts_per_step,
            group_size=cfg.rollout.n,
            max_new_tokens=cfg.rollout.max_new_tokens,
            games=cfg.task.name == "textarena",
            old_logprobs=old_logprobs_source(cfg),
        )


@dataclass(frozen=True)
class HeldOutSettings:
    """The driver's held-out evaluation (relay_trainer/steps.py): what its episodes' metrics read."""

    task: TaskConfig  # success_threshold and env (accuracy or success rate), name (textarena's moves)
    tool_calls: bool  # tools.enabled or task.agent: tool calls, errors and turns per episode

    @classmethod
    def of(cls, cfg: Config) -> HeldOutSettings:
        return cls(task=cfg.task, tool_calls=cfg.tools.enabled or cfg.task.agent)
