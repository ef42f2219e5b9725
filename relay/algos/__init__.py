"""RL math: advantage estimators, policy/value losses, KL. Pure functions of tensors."""

from relay.algos.advantages import (
    ESTIMATORS,
    compute_advantages,
    mixed_group_mask,
    overlong_penalty,
)
from relay.algos.kl import KL_ESTIMATORS, kl_penalty
from relay.algos.losses import (
    POLICY_LOSSES,
    aggregate,
    entropy_from_logits,
    policy_loss,
    truncated_is_weights,
    value_loss,
)
from relay.algos.names import AGG_MODES, TOKEN_LEVEL_ESTIMATORS
from relay.algos.utils import masked_mean, masked_sum, masked_var, masked_whiten

__all__ = [
    "ESTIMATORS",
    "TOKEN_LEVEL_ESTIMATORS",
    "compute_advantages",
    "mixed_group_mask",
    "overlong_penalty",
    "KL_ESTIMATORS",
    "kl_penalty",
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
