"""CISPO (relay/algos/policy_losses/cispo.py) against hand-computed numbers, and chosen by config."""

import math

import pytest
import torch

from relay.algos.objective import Objective, policy_loss
from relay.config import load_config


def close(a, b, tol=1e-5):
    b = torch.as_tensor(b, dtype=a.dtype)
    assert a.shape == b.shape and torch.allclose(a, b, atol=tol, rtol=0), f"\n{a}\n!=\n{b}"


# One row: ratios 1.5 (A=1), 8 (A=1), 0.5 (A=-2), then a masked token holding junk.
LOGP = [-1.0, -2.0, -0.5, float("nan")]
RATIOS = [1.5, 8.0, 0.5, 1.0]
OLD = torch.tensor([[lp - math.log(r) for lp, r in zip(LOGP, RATIOS)]])
ADV = torch.tensor([[1.0, 1.0, -2.0, 5.0]])
MASK = torch.tensor([[1.0, 1, 1, 0]])


def test_cispo_by_hand():
    logp = torch.tensor([LOGP], requires_grad=True)
    loss, m = policy_loss("cispo", logprobs=logp, old_logprobs=OLD, advantages=ADV, loss_mask=MASK)
    # Defaults: the weight is capped at 1 + 5 = 6, no floor: w = [1.5, 6, 0.5].
    # loss_t = -w A log pi: -1.5*1*(-1) = 1.5; -6*1*(-2) = 12; -0.5*(-2)*(-0.5) = -0.5; token-mean 13/3.
    close(loss, 13 / 3)
    loss.backward()
    # d/dlogp = -w A / 3: every token keeps its gradient, the one at ratio 8 too (PPO would drop it),
    # only its weight is capped: [-1.5/3, -6/3, 1/3].
    close(logp.grad, [[-0.5, -2.0, 1 / 3, 0.0]])
    assert m["pg_clipfrac"] == pytest.approx(1 / 3)  # the ratio-8 token's weight
    assert m["ratio_mean"] == pytest.approx((1.5 + 8 + 0.5) / 3, rel=1e-5)


def test_cispo_floor_and_cap():
    logp = torch.tensor([LOGP], requires_grad=True)
    kw = {"eps_low_is": 0.2, "eps_high_is": 0.2}
    loss, m = policy_loss("cispo", logprobs=logp, old_logprobs=OLD, advantages=ADV, loss_mask=MASK, **kw)
    # w = clip([1.5, 8, 0.5], 0.8, 1.2) = [1.2, 1.2, 0.8]: losses 1.2, 2.4, -0.8; mean 2.8/3.
    close(loss, 2.8 / 3)
    loss.backward()
    close(logp.grad, [[-1.2 / 3, -1.2 / 3, 1.6 / 3, 0.0]])
    assert m["pg_clipfrac"] == pytest.approx(1.0)


def test_cispo_is_chosen_by_config_with_its_hyperparameter():
    cfg = load_config(None, ["algorithm.policy_loss=cispo", "algorithm.policy_loss_args.eps_high_is=0.2"])
    objective = Objective.from_settings(cfg.algorithm, tis_cap=None)
    logp = torch.tensor([LOGP])
    loss, m = objective(
        logprobs=logp,
        entropy=torch.zeros(1, 4),
        old_logprobs=OLD,
        rollout_logprobs=OLD,
        ref_logprobs=None,
        advantages=ADV,
        loss_mask=MASK,
    )
    # w = [1.2, 1.2, 0.5] (cap 1.2, no floor): losses 1.2, 2.4, -0.5
    close(loss, 3.1 / 3)
    assert m["pg_loss"] == m["loss"] == pytest.approx(3.1 / 3)
