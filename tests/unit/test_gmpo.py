"""GMPO (relay/algos/policy_losses/gmpo.py) against hand-computed numbers, and chosen by config."""

import math

import pytest
import torch

from relay.algos.objective import Objective, policy_loss
from relay.config import load_config


def close(a, b, tol=1e-5):
    b = torch.as_tensor(b, dtype=a.dtype)
    assert a.shape == b.shape and torch.allclose(a, b, atol=tol, rtol=0), f"\n{a}\n!=\n{b}"


# Row 0: log ratios [0.1, 0.6, -0.6], A = 1. Row 1: log ratios [0.5, -0.5] (+ a masked junk token), A = -2.
LOGP = [[0.1, 0.6, -0.6], [0.5, -0.5, float("nan")]]
ADV = torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, 7.0]])
MASK = torch.tensor([[1.0, 1, 1], [1, 1, 0]])
OLD = torch.zeros(2, 3)
# Log ratios clipped to [-0.4, 0.4] (the defaults), pessimistically (the paper's min):
# row 0, A > 0: min(lr, clip(lr)) = [0.1, 0.4, -0.6]: 0.6 is clipped; -0.6 is kept (it lowers the
#   objective); geometric mean exp(-0.1/3); loss_0 = -1 * exp(-1/30).
# row 1, A < 0: max(lr, clip(lr)) = [0.5, -0.4]: -0.5 is clipped; mean 0.05; loss_1 = 2 * exp(0.05).
L0, L1 = -math.exp(-1 / 30), 2 * math.exp(0.05)


def test_gmpo_by_hand():
    logp = torch.tensor(LOGP, requires_grad=True)
    loss, m = policy_loss(
        "gmpo", logprobs=logp, old_logprobs=OLD, advantages=ADV, loss_mask=MASK, agg_mode="seq-mean-token-mean"
    )
    close(loss, (L0 + L1) / 2)  # the paper's mean over sequences
    loss.backward()
    # d loss_i / d logp_t = loss_i / |o_i| on unclipped tokens, 0 on clipped ones; then / 2 sequences:
    # row 0: -exp(-1/30) / 3 / 2 at t0 and t2;  row 1: 2 exp(0.05) / 2 / 2 at t0.
    g0, g1 = L0 / 3 / 2, L1 / 2 / 2
    close(logp.grad, [[g0, 0.0, g0], [g1, 0.0, 0.0]])
    assert m["pg_clipfrac"] == pytest.approx(2 / 5)
    assert m["ratio_mean"] == pytest.approx((3 * math.exp(-1 / 30) + 2 * math.exp(0.05)) / 5, rel=1e-5)


def test_gmpo_token_mean_weighs_sequences_by_length():
    loss, _ = policy_loss("gmpo", logprobs=torch.tensor(LOGP), old_logprobs=OLD, advantages=ADV, loss_mask=MASK)
    close(loss, (3 * L0 + 2 * L1) / 5)  # every model token carries its sequence's loss


def test_gmpo_is_chosen_by_config_with_its_hyperparameters():
    overrides = ["algorithm.policy_loss=gmpo", "algorithm.policy_loss_args={log_clip_low: 0.7, log_clip_high: 0.7}"]
    cfg = load_config(None, [*overrides, "algorithm.loss_agg=seq-mean-token-mean"])
    loss, _ = Objective.from_settings(cfg.algorithm, tis_cap=None)(
        logprobs=torch.tensor(LOGP),
        entropy=torch.zeros(2, 3),
        old_logprobs=OLD,
        rollout_logprobs=OLD,
        ref_logprobs=None,
        advantages=ADV,
        loss_mask=MASK,
    )
    # nothing is clipped at +-0.7: row 0's mean log ratio is 0.1/3, row 1's is 0
    close(loss, (-math.exp(0.1 / 3) + 2 * 1.0) / 2)
