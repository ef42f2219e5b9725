"""What the training roles are started with: the config sections each reads, and the choices
resolved from several sections (relay/config/resolved.py), picked once from the whole tree where
the actors are made (actors/pools.py). A role holds these and nothing else of the config, so its
settings only ever flow down to it, and a test or benchmark builds one from any Config with `of`.
"""

from __future__ import annotations

from dataclasses import dataclass

from relay.config.resolved import old_logprobs_source, tis_cap
from relay.config.schema import AlgorithmConfig, Config, CriticConfig, ModelConfig, TrainingConfig
from relay.config.sft import SftConfig


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
