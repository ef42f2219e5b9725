"""SAPO (Gao et al. 2025, "Soft Adaptive Policy Optimization"): a smooth, temperature-controlled
gate in place of the hard clip.

    loss_t = -f(r_t) * A_t,   f(r) = sigmoid(tau * (r - 1)) * 4 / tau,   r_t = pi_t / pi_old_t
    tau = tau_pos where A_t > 0, else tau_neg

The gradient is -A_t * w(r_t) * grad log pi_t with w(r) = 4 sigmoid(tau (r-1)) (1 - sigmoid(tau (r-1))) r:
exactly the policy gradient at r = 1 (w = 1), fading smoothly as r moves away, instead of
dropping to 0 at a clip boundary; a larger tau fades faster. The paper fades negative-advantage
tokens faster (tau_neg > tau_pos): their updates raise many other tokens' probabilities and
destabilize training more. It averages tokens per sequence, then sequences
(algorithm.loss_agg seq-mean-token-mean).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from relay.algos.losses import TokenLoss


@dataclass(frozen=True)
class Hyperparameters:
    tau_pos: float = 1.0  # the gate's temperature for tokens with A > 0 (the paper's value)
    tau_neg: float = 1.05  # and for A <= 0 (the paper's value)

    def problems(self) -> dict[str, str]:
        return {
            k: f"must be > 0, got {v}" for k, v in (("tau_pos", self.tau_pos), ("tau_neg", self.tau_neg)) if not v > 0
        }


def per_token_loss(hp: Hyperparameters, *, logprobs, old_logprobs, advantages, loss_mask) -> TokenLoss:
    import torch

    from relay.algos.losses import TokenLoss, log_ratio, on_tokens
    from relay.algos.utils import masked_mean

    log_r = log_ratio(logprobs, old_logprobs, loss_mask)
    ratio = log_r.exp()  # [B,R]
    adv = on_tokens(loss_mask, advantages.detach())
    tau = torch.where(adv > 0, ratio.new_tensor(hp.tau_pos), ratio.new_tensor(hp.tau_neg))  # [B,R]
    gate = torch.sigmoid(tau * (ratio - 1.0))
    loss = -gate * (4.0 / tau) * adv
    with torch.no_grad():  # w(r) / r: the gradient's scale against the plain policy gradient's
        metrics = {"sapo_gate_mean": masked_mean(4.0 * gate * (1.0 - gate), loss_mask).item()}
    return TokenLoss(loss, torch.zeros_like(ratio, dtype=torch.bool), ratio, log_r, metrics)
