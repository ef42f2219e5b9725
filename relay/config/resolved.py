"""Settings whose null means "decided by other settings", and choices that follow from settings
alone, resolved where the code reads them."""

from __future__ import annotations

from relay.config.schema import Config

# What a null algorithm.tis_cap means where samples come from older weights: measured on the default
# task (8 seeds, docs/benchmarks/async_parity.md), async without it ends 5 points below sync; with 2.0, within noise.
STALE_SAMPLES_TIS_CAP = 2.0


def tis_cap(cfg: Config) -> float | None:
    """The truncated-IS cap the learner uses: algorithm.tis_cap, its null resolved by training.mode."""
    cap = cfg.algorithm.tis_cap
    if cap is None:
        return None if cfg.training.mode == "sync" else STALE_SAMPLES_TIS_CAP
    return cap or None  # 0: off


def kl_in_reward(cfg: Config) -> bool:
    """A per-token KL penalty in the reward: a reference policy (kl_coef > 0) and algorithm.kl_in=reward."""
    return cfg.algorithm.kl_coef > 0 and cfg.algorithm.kl_in == "reward"


# Where a step's old logprobs (the learner's, on the weights its update starts from) come from
BEFORE_UPDATE = "before_update"  # a learner call of their own, before the update calls
UPDATE_FORWARD = "update_forward"  # the update's own forward pass, detached
RECOMPUTE = "recompute"  # one no-grad pass at the start of the update


def old_logprobs_source(cfg: Config) -> str:
    """The one place that chooses where a step's old logprobs come from (relay/update/old_logprobs.py
    computes them; the ratio and the KL read them)."""
    t = cfg.training
    if kl_in_reward(cfg):  # the penalty is part of the advantages, which the learner's and the critic's updates build
        return BEFORE_UPDATE
    if t.ppo_epochs == 1 and t.mini_batches == 1:  # on-policy: every loss is read before the one optimizer step
        return UPDATE_FORWARD
    return RECOMPUTE  # later mini-batches and epochs run on weights that have already moved
