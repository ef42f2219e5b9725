"""The checks of `algorithm.*`. An estimator's or a policy loss's hyperparameters are checked by
their own module (relay/algos/registry.py binds the config to them); this adds what ties the
estimator to the rest of the run (critic, group size) and the section's other keys. No torch."""

from __future__ import annotations

from relay.algos.kl import KL_ESTIMATORS
from relay.algos.registry import AGG_MODES, ESTIMATORS, POLICY_LOSSES
from relay.config.schema import Config


def validate_algorithm(cfg: Config) -> list[str]:
    """algorithm.*: the estimator and the policy loss with their hyperparameters (each checked where it
    is declared, relay/algos/registry.py), what the estimator needs of the rest of the run, the rest."""
    a, p = cfg.algorithm, []
    p += ESTIMATORS.problems(a)
    p += POLICY_LOSSES.problems(a)
    if a.loss_agg not in AGG_MODES:
        p.append(f"algorithm.loss_agg: {a.loss_agg!r} is not one of {list(AGG_MODES)}")
    if a.kl_estimator not in KL_ESTIMATORS:
        p.append(f"algorithm.kl_estimator: {a.kl_estimator!r} is not one of {list(KL_ESTIMATORS)}")
    if a.kl_coef < 0:
        p.append(f"algorithm.kl_coef: must be >= 0, got {a.kl_coef}")
    if a.tis_cap is not None and a.tis_cap != 0 and a.tis_cap < 1:
        p.append(f"algorithm.tis_cap: must be >= 1, 0 (off) or null (by training.mode), got {a.tis_cap}")
    if a.estimator not in ESTIMATORS:
        return p
    traits, with_values = ESTIMATORS[a.estimator].TRAITS, [n for n in ESTIMATORS if ESTIMATORS[n].TRAITS.uses_values]
    if traits.uses_values and not cfg.critic.enabled:
        others = ", ".join(n for n in ESTIMATORS if n not in with_values)
        p.append(f"algorithm.estimator={a.estimator} needs a value model: set critic.enabled=true (or pick {others})")
    if cfg.critic.enabled and not traits.uses_values:
        p.append(
            f"critic.enabled=true but algorithm.estimator={a.estimator} never uses values: "
            f"use estimator {' or '.join(with_values)} or disable the critic"
        )
    if traits.needs_groups and cfg.rollout.n < 2:
        p.append(
            f"algorithm.estimator={a.estimator} with rollout.n={cfg.rollout.n}: group baselines need rollout.n >= 2"
        )
    return p
