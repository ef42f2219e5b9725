"""SAPO (relay/algos/policy_losses/sapo.py) against hand-computed numbers, and chosen by config."""

import math

import pytest
import torch

from relay.algos.objective import Objective, policy_loss
from relay.config import load_config


def close(a, b, tol=1e-5):
    b = torch.as_tensor(b, dtype=a.dtype)
    assert a.shape == b.shape and torch.allclose(a, b, atol=tol, rtol=0), f"\n{a}\n!=\n{b}"


def sigmoid(x):
    return 1 / (1 + math.exp(-x))


# One row: ratios 1 (A=1), 2 (A=1), 0.5 (A=-1), then a masked token holding junk.
LOGP = [0.0, math.log(2.0), math.log(0.5), float("inf")]
ADV = torch.tensor([[1.0, 1.0, -1.0, 3.0]])
MASK = torch.tensor([[1.0, 1, 1, 0]])
OLD = torch.zeros(1, 4)


def test_sapo_by_hand():
    logp = torch.tensor([LOGP], requires_grad=True)
    loss, m = policy_loss("sapo", logprobs=logp, old_logprobs=OLD, advantages=ADV, loss_mask=MASK)
    # loss_t = -A (4/tau) sigmoid(tau (r-1)); tau = 1 for A > 0, 1.05 for A < 0 (the defaults).
    # t0: r=1: -4 * sigmoid(0) = -2.   t1: r=2: -4 s1, s1 = sigmoid(1).
    # t2: r=0.5, A=-1: +(4/1.05) s2, s2 = sigmoid(1.05 * -0.5) = sigmoid(-0.525).
    s1, s2 = sigmoid(1.0), sigmoid(-0.525)
    close(loss, (-2 - 4 * s1 + 4 / 1.05 * s2) / 3)
    loss.backward()
    # d/dlogp = -A * 4 s (1-s) * r (dr/dlogp = r), / 3 for the token mean:
    # t0: -1 * 4 * 1/4 * 1 = -1, exactly the plain policy gradient at r = 1;
    # t1: -4 s1 (1-s1) * 2;  t2: +4 s2 (1-s2) * 0.5: the gate fades the gradient as r leaves 1.
    close(logp.grad, [[-1 / 3, -8 * s1 * (1 - s1) / 3, 2 * s2 * (1 - s2) / 3, 0.0]])
    assert m["pg_clipfrac"] == 0.0  # no hard clip
    assert m["sapo_gate_mean"] == pytest.approx((1 + 4 * s1 * (1 - s1) + 4 * s2 * (1 - s2)) / 3, rel=1e-5)


def test_sapo_temperatures():
    logp = torch.tensor([LOGP], requires_grad=True)
    loss, _ = policy_loss(
        "sapo", logprobs=logp, old_logprobs=OLD, advantages=ADV, loss_mask=MASK, tau_pos=2.0, tau_neg=4.0
    )
    # t0: -(4/2) sigmoid(0) = -1;  t1: -(4/2) sigmoid(2);  t2: +(4/4) sigmoid(4 * -0.5) = sigmoid(-2)
    close(loss, (-1 - 2 * sigmoid(2.0) + sigmoid(-2.0)) / 3)
    loss.backward()
    # the gradient at r = 1 does not depend on tau: still -A / 3
    assert logp.grad[0, 0].item() == pytest.approx(-1 / 3)


def test_sapo_is_chosen_by_config_with_its_hyperparameters():
    cfg = load_config(None, ["algorithm.policy_loss=sapo", "algorithm.policy_loss_args={tau_pos: 2, tau_neg: 4}"])
    loss, _ = Objective.from_settings(cfg.algorithm, tis_cap=None)(
        logprobs=torch.tensor([LOGP]),
        entropy=torch.zeros(1, 4),
        old_logprobs=OLD,
        rollout_logprobs=OLD,
        ref_logprobs=None,
        advantages=ADV,
        loss_mask=MASK,
    )
    close(loss, (-1 - 2 * sigmoid(2.0) + sigmoid(-2.0)) / 3)
