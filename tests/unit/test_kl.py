"""KL estimators and coefficient controllers."""

import json
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.algos.kl import KL_ESTIMATORS, kl_penalty
from relay.update.kl_control import AdaptiveKLController, FixedKLController


def close(a, b, tol=1e-5):
    b = torch.as_tensor(b, dtype=a.dtype)
    assert a.shape == b.shape and torch.allclose(a, b, atol=tol, rtol=0), f"\n{a}\n!=\n{b}"


# pi = [.5, .2], ref = [.25, .4]: log pi - log ref = [ln 2, -ln 2]
LOGP = torch.tensor([[math.log(0.5), math.log(0.2)]])
REF = torch.tensor([[math.log(0.25), math.log(0.4)]])
LN2 = math.log(2)


def test_k1_k2_k3_by_hand():
    close(kl_penalty(LOGP, REF, "k1"), [[LN2, -LN2]])
    close(kl_penalty(LOGP, REF, "k2"), [[0.5 * LN2**2, 0.5 * LN2**2]])
    # k3 = exp(ref - logp) - (ref - logp) - 1: [.5 + ln2 - 1, 2 - ln2 - 1]
    close(kl_penalty(LOGP, REF, "k3"), [[0.5 + LN2 - 1, 2 - LN2 - 1]])


def test_k3_is_clamped_and_finite():
    logp = torch.tensor([[0.0, -100.0, -5.0]])
    ref = torch.tensor([[-100.0, 0.0, -5.0]])
    kl = kl_penalty(logp, ref, "k3")
    # log ratio -20: exp(-20) + 20 - 1 ~ 19 -> 10; log ratio +20: exp(20) - 21 -> 10; equal: 0
    close(kl, [[10.0, 10.0, 0.0]])


def test_estimators_agree_with_exact_kl_on_samples():
    # k1 and k3 are unbiased for KL(pi || ref) on tokens drawn from pi.
    pi = torch.tensor([0.6, 0.3, 0.1])
    ref = torch.tensor([0.2, 0.5, 0.3])
    exact = (pi * (pi / ref).log()).sum().item()
    idx = torch.multinomial(pi, 200_000, replacement=True, generator=torch.Generator().manual_seed(0))
    logp, logr = pi.log()[idx][None], ref.log()[idx][None]
    for kind in ("k1", "k3"):
        assert kl_penalty(logp, logr, kind).mean().item() == pytest.approx(exact, abs=0.01)


def test_unknown_kind_lists_choices():
    with pytest.raises(ValueError, match="k1.*k2.*k3"):
        kl_penalty(LOGP, REF, "k4")
    assert set(KL_ESTIMATORS) == {"k1", "k2", "k3"}


def test_fixed_controller():
    c = FixedKLController(0.05)
    c.update(current_kl=10.0, n_steps=256)
    assert c.value == 0.05
    c2 = FixedKLController(1.0)
    c2.load_state_dict(json.loads(json.dumps(c.state_dict())))
    assert c2.value == 0.05


def test_adaptive_controller_by_hand():
    c = AdaptiveKLController(init_coef=0.1, target=6.0, horizon=10000)
    c.update(current_kl=9.0, n_steps=256)  # error 0.5 clipped to 0.2
    assert c.value == pytest.approx(0.1 * (1 + 0.2 * 256 / 10000))
    c.update(current_kl=5.4, n_steps=100)  # error -0.1, inside the clip
    assert c.value == pytest.approx(0.1 * (1 + 0.2 * 256 / 10000) * (1 - 0.1 * 100 / 10000))
    restored = AdaptiveKLController(init_coef=1.0, target=6.0, horizon=10000)
    restored.load_state_dict(json.loads(json.dumps(c.state_dict())))
    assert restored.value == c.value


@settings(max_examples=100, deadline=None)
@given(
    init=st.floats(1e-4, 10.0),
    target=st.floats(1e-3, 10.0),
    kl=st.floats(0.0, 100.0),
    n_steps=st.integers(1, 1024),
    horizon=st.integers(1024, 100_000),
)
def test_adaptive_controller_moves_toward_target(init, target, kl, n_steps, horizon):
    c = AdaptiveKLController(init_coef=init, target=target, horizon=horizon)
    c.update(current_kl=kl, n_steps=n_steps)
    step = 0.2 * n_steps / horizon
    if kl > target * (1 + 1e-9):  # too much KL: penalize more
        assert c.value > init
    elif kl < target * (1 - 1e-9):  # too little: penalize less
        assert c.value < init
    # One update never moves the coefficient by more than the clipped error allows.
    assert init * (1 - step) * (1 - 1e-12) <= c.value <= init * (1 + step) * (1 + 1e-12)
