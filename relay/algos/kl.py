"""KL(pi || ref) per-token estimators (the coefficient controllers: relay/update/kl_control.py).

Estimators follow Schulman, "Approximating KL Divergence" (2020), for tokens sampled from pi:
  k1 = log pi - log ref                      unbiased, high variance, can be negative
  k2 = 0.5 (log pi - log ref)^2              biased, low variance, >= 0
  k3 = ref/pi - log(ref/pi) - 1              unbiased, low variance, >= 0

Which to use depends on where the KL goes (Tang & Munos 2025, "On a few pitfalls in KL
divergence gradient estimation for RL"):
  * as a reward penalty (no gradient through it): k1 or k3 give the KL *value*;
  * as a loss term (differentiated, GRPO style): on-policy, grad of k2 is the gradient of
    KL(pi || ref) in expectation, while grad of k3 is the gradient of the *forward*
    KL(ref || pi); grad of k1 is 0 in expectation. k3 is still the common GRPO default.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the estimators use tensor methods only: the driver reads KL_ESTIMATORS without torch
    import torch


def kl_k1(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """[B,R] log pi - log ref."""
    return logprobs - ref_logprobs


def kl_k2(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """[B,R] 0.5 * (log pi - log ref)^2."""
    return 0.5 * (logprobs - ref_logprobs).square()


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """[B,R] exp(ref - logp) - (ref - logp) - 1, clamped (the low-variance KL).

    The log-ratio clamp to [-20, 20] keeps exp finite when a token is far more likely under
    one model; the output clamp to [-10, 10] bounds a single token's pull on the loss.
    """
    log_ratio = (ref_logprobs - logprobs).clamp(min=-20.0, max=20.0)
    return (log_ratio.exp() - log_ratio - 1.0).clamp(min=-10.0, max=10.0)


KL_ESTIMATORS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {  # algorithm.kl_estimator
    "k1": kl_k1,
    "k2": kl_k2,
    "k3": kl_k3,
}


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kind: str) -> torch.Tensor:
    """[B,R] per-token estimate of KL(pi || ref). Mask it yourself (masked_mean / aggregate)."""
    try:
        fn = KL_ESTIMATORS[kind]
    except KeyError:
        raise ValueError(f"unknown KL estimator {kind!r}; choose one of {sorted(KL_ESTIMATORS)}") from None
    return fn(logprobs, ref_logprobs)
