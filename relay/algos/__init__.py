"""RL math: advantage estimators, policy/value losses, KL. Pure functions of tensors."""

from relay.algos.advantages import (
    ESTIMATORS,
    TOKEN_LEVEL_ESTIMATORS,
    compute_advantages,
    mixed_group_mask,
    overlong_penalty,
)
from relay.algos.kl import (
    KL_ESTIMATORS,
    AdaptiveKLController,
    FixedKLController,
    KLController,
    kl_penalty,
    make_kl_controller,
)
from relay.algos.losses import (
    AGG_MODES,
    POLICY_LOSSES,
    aggregate,
    entropy_from_logits,
    policy_loss,
    truncated_is_weights,
    value_loss,
)
from relay.algos.utils import masked_mean, masked_sum, masked_var, masked_whiten

__all__ = [
    "ESTIMATORS",
    "TOKEN_LEVEL_ESTIMATORS",
    "compute_advantages",
    "mixed_group_mask",
    "overlong_penalty",
    "KL_ESTIMATORS",
    "KLController",
    "FixedKLController",
    "AdaptiveKLController",
    "kl_penalty",
    "make_kl_controller",
    "AGG_MODES",
    "POLICY_LOSSES",
    "aggregate",
    "policy_loss",
    "truncated_is_weights",
    "value_loss",
    "entropy_from_logits",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
]
