"""Policy / value losses, aggregation, entropy and IS weights against hand-computed numbers."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.algos.losses import aggregate, entropy_from_logits, truncated_is_weights, value_loss
from relay.algos.objective import policy_loss
from relay.algos.registry import AGG_MODES, POLICY_LOSSES


def close(a, b, tol=1e-5):
    # Not torch.testing.assert_close: its first call imports torch.distributed (seconds).
    b = torch.as_tensor(b, dtype=a.dtype)
    assert a.shape == b.shape and torch.allclose(a, b, atol=tol, rtol=0), f"\n{a}\n!=\n{b}"


def leaf(x):
    return torch.tensor(x, dtype=torch.float32, requires_grad=True)


# ------------------------------------------------------------------------------------ aggregate

LOSS = torch.tensor([[1.0, 2, 3, 4], [5, 6, 7, 8]])
AMASK = torch.tensor([[1.0, 1, 0, 0], [1, 1, 1, 0]])


@pytest.mark.parametrize(
    "mode, kw, expected",
    [
        ("token-mean", {}, (1 + 2 + 5 + 6 + 7) / 5),
        ("seq-mean-token-sum", {}, (3 + 18) / 2),
        ("seq-mean-token-mean", {}, (1.5 + 6) / 2),
        ("seq-mean-token-sum-norm", {}, (3 / 4 + 18 / 4) / 2),  # norm_len defaults to R = 4
        ("seq-mean-token-sum-norm", {"norm_len": 6}, (3 / 6 + 18 / 6) / 2),
    ],
)
def test_aggregate_by_hand(mode, kw, expected):
    close(aggregate(LOSS, AMASK, mode, **kw), expected)
    # An empty row (and garbage under it) changes nothing: it is not counted as a sequence.
    loss3 = torch.cat([LOSS, torch.full((1, 4), float("nan"))])
    mask3 = torch.cat([AMASK, torch.zeros(1, 4)])
    close(aggregate(loss3, mask3, mode, **kw), expected)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_aggregate_all_masked_is_zero_with_finite_grad(mode):
    x = leaf([[1.0, 2.0], [3.0, 4.0]])
    out = aggregate(x, torch.zeros(2, 2), mode)
    out.backward()
    assert out.item() == 0.0 and torch.all(x.grad == 0)


def test_aggregate_unknown_mode():
    with pytest.raises(ValueError, match="token-mean"):
        aggregate(LOSS, AMASK, "sum")
    with pytest.raises(ValueError, match="norm_len"):
        aggregate(LOSS, AMASK, "seq-mean-token-sum-norm", norm_len=0)


# ------------------------------------------------------------------------------------ PPO family

# One row: ratios 1.5 (A=1), 0.5 (A=-1), 1.1 (A=-2), then a masked token.
PPO_MASK = torch.tensor([[1.0, 1, 1, 0]])
PPO_ADV = torch.tensor([[1.0, -1.0, -2.0, 5.0]])
PPO_LOGR = [math.log(1.5), math.log(0.5), math.log(1.1), 0.0]


def test_ppo_by_hand():
    logp = leaf([PPO_LOGR])
    loss, m = policy_loss("ppo", logprobs=logp, old_logprobs=torch.zeros(1, 4), advantages=PPO_ADV, loss_mask=PPO_MASK)
    # token 0: max(-1.5, -1.2) = -1.2 (clipped); token 1: max(0.5, 0.8) = 0.8 (clipped);
    # token 2: -(-2) * 1.1 = 2.2 inside the trust region.
    close(loss, (-1.2 + 0.8 + 2.2) / 3)
    loss.backward()
    # Only token 2 has a gradient: d/dlogp (2 * ratio) / 3 = 2 * 1.1 / 3
    close(logp.grad, [[0, 0, 2.2 / 3, 0]])
    assert m["pg_clipfrac"] == pytest.approx(2 / 3)
    assert m["ppo_kl"] == pytest.approx(-sum(PPO_LOGR[:3]) / 3, abs=1e-6)
    assert m["ratio_mean"] == pytest.approx((1.5 + 0.5 + 1.1) / 3, abs=1e-6)


def test_ppo_clip_higher():
    # DAPO clip-higher: with clip_high 0.6 the ratio 1.5 is inside and not clipped any more.
    loss, m = policy_loss(
        "ppo",
        logprobs=torch.tensor([PPO_LOGR]),
        old_logprobs=torch.zeros(1, 4),
        advantages=PPO_ADV,
        loss_mask=PPO_MASK,
        clip_high=0.6,
    )
    close(loss, (-1.5 + 0.8 + 2.2) / 3)
    assert m["pg_clipfrac"] == pytest.approx(1 / 3)


def test_ppo_is_weights_scale_tokens_and_get_no_grad():
    w = leaf([[2.0, 0.5, 1.0, 100.0]])
    loss, m = policy_loss(
        "ppo",
        logprobs=torch.tensor([PPO_LOGR]),
        old_logprobs=torch.zeros(1, 4),
        advantages=PPO_ADV,
        loss_mask=PPO_MASK,
        is_weights=w,
    )
    close(loss, (-1.2 * 2 + 0.8 * 0.5 + 2.2) / 3)
    assert not loss.requires_grad
    assert m["is_weight_mean"] == pytest.approx(3.5 / 3)


def test_dual_clip_by_hand():
    # ratios 5 (A=-1), 2 (A=-1), 5 (A=+1)
    logp = leaf([[math.log(5), math.log(2), math.log(5)]])
    adv = torch.tensor([[-1.0, -1.0, 1.0]])
    loss, m = policy_loss(
        "dual_clip",
        logprobs=logp,
        old_logprobs=torch.zeros(1, 3),
        advantages=adv,
        loss_mask=torch.ones(1, 3),
    )
    # token 0: min(max(5, 1.2), 3) = 3 (dual clip, no gradient); token 1: 2 (below c * |A|);
    # token 2: positive advantage, plain PPO: max(-5, -1.2) = -1.2.
    close(loss, (3 + 2 - 1.2) / 3)
    loss.backward()
    close(logp.grad, [[0, 2 / 3, 0]])
    assert m["pg_clipfrac_lower"] == pytest.approx(1 / 3)
    ppo, _ = policy_loss(
        "ppo", logprobs=logp, old_logprobs=torch.zeros(1, 3), advantages=adv, loss_mask=torch.ones(1, 3)
    )
    close(ppo, (5 + 2 - 1.2) / 3)  # without the dual clip, token 0 costs 5


def test_gspo_by_hand():
    # Row 0: log ratios [.2, -.1] (+ a masked token) -> s = exp(.05), inside [0.8, 1.2], A = 1.
    # Row 1: log ratios .3 on all three -> s = exp(.3) = 1.35 > 1.2, A = 2: clipped at -2.4.
    logp = leaf([[0.2, -0.1, 7.0], [0.3, 0.3, 0.3]])
    mask = torch.tensor([[1.0, 1, 0], [1, 1, 1]])
    adv = torch.tensor([[1.0, 1.0, 0.0], [2.0, 2.0, 2.0]])
    s0 = math.exp(0.05)
    loss, m = policy_loss("gspo", logprobs=logp, old_logprobs=torch.zeros(2, 3), advantages=adv, loss_mask=mask)
    close(loss, (2 * -s0 + 3 * -2.4) / 5)
    loss.backward()
    close(logp.grad, [[-s0 / 5, -s0 / 5, 0], [0, 0, 0]])
    assert m["pg_clipfrac"] == pytest.approx(3 / 5)
    assert m["ratio_mean"] == pytest.approx((2 * s0 + 3 * math.exp(0.3)) / 5, abs=1e-5)


def test_gspo_token_form_matches_sequence_objective():
    # With sequence advantages and seq-mean-token-mean, GSPO-token has the value and gradient
    # of the paper's sequence objective: mean_i max(-A_i s_i, -A_i clip(s_i)).
    g = torch.Generator().manual_seed(0)
    mask = torch.tensor([[1.0, 1, 1, 0], [1, 0, 1, 1], [1, 1, 0, 0]])
    old = torch.randn(3, 4, generator=g) - 2
    adv_row = torch.tensor([1.0, -0.5, 2.0])
    logp = (old + 0.1 * torch.randn(3, 4, generator=g)).requires_grad_(True)
    loss, _ = policy_loss(
        "gspo",
        logprobs=logp,
        old_logprobs=old,
        advantages=adv_row[:, None].expand(3, 4),
        loss_mask=mask,
        agg_mode="seq-mean-token-mean",
        clip_low=0.03,
        clip_high=0.04,
    )
    (grad,) = torch.autograd.grad(loss, logp)

    logp2 = logp.detach().clone().requires_grad_(True)
    s = torch.exp(((logp2 - old) * mask).sum(-1) / mask.sum(-1))
    ref = torch.maximum(-adv_row * s, -adv_row * s.clamp(0.97, 1.04)).mean()
    (grad2,) = torch.autograd.grad(ref, logp2)
    close(loss, ref.item())
    close(grad, grad2 * mask)


@pytest.mark.parametrize("name", sorted(POLICY_LOSSES))
@pytest.mark.parametrize("agg_mode", AGG_MODES)
def test_masked_tokens_change_nothing(name, agg_mode):
    g = torch.Generator().manual_seed(1)
    mask = torch.tensor([[1.0, 1, 0, 0], [1, 0, 1, 1], [0, 0, 0, 0]])
    logp = torch.randn(3, 4, generator=g) * 0.3 - 1
    old = logp + torch.randn(3, 4, generator=g) * 0.2
    adv = torch.randn(3, 4, generator=g)
    w = torch.rand(3, 4, generator=g) + 0.5

    def run(lp, o, a, iw):
        lp = lp.clone().requires_grad_(True)
        loss, m = policy_loss(
            name, logprobs=lp, old_logprobs=o, advantages=a, loss_mask=mask, agg_mode=agg_mode, is_weights=iw
        )
        loss.backward()
        return loss.detach(), lp.grad, m

    junk = torch.tensor([float("nan"), float("inf"), -float("inf"), 1e30])
    off = mask == 0

    def poison(x):
        y = x.clone()
        y[off] = junk.repeat(4)[: int(off.sum())]
        return y

    l1, g1, m1 = run(logp, old, adv, w)
    l2, g2, m2 = run(poison(logp), poison(old), poison(adv), poison(w))
    assert torch.isfinite(l1) and torch.equal(l1, l2)
    assert torch.equal(g1, g2) and torch.all(g2[off] == 0)
    assert m1 == m2


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["above", "below", "inside"]),
            st.floats(0.05, 3.0),  # |A|
            st.floats(0.0, 1.0),  # where in the chosen ratio range
        ),
        min_size=1,
        max_size=8,
    ),
    st.floats(0.05, 0.4),
    st.floats(0.05, 0.4),
)
def test_ppo_zero_grad_outside_trust_region(tokens, clip_low, clip_high):
    # "above": ratio > 1 + clip_high with A > 0; "below": ratio < 1 - clip_low with A < 0. There
    # the clipped term is the max and is constant in logp. "inside": strictly within the bounds.
    lo, hi = 1 - clip_low, 1 + clip_high
    ratios, advs = [], []
    for kind, a, u in tokens:
        if kind == "above":
            r, a = hi * (1.01 + u), a
        elif kind == "below":
            r, a = lo * (0.99 - 0.9 * u), -a
        else:
            r, a = lo + (hi - lo) * (0.05 + 0.9 * u), (a if u > 0.5 else -a)
        ratios.append(r)
        advs.append(a)
    logp = torch.tensor([[math.log(r) for r in ratios]], dtype=torch.float64, requires_grad=True)
    adv = torch.tensor([advs], dtype=torch.float64)
    mask = torch.ones_like(adv)
    for name in ("ppo", "dual_clip"):
        loss, _ = policy_loss(
            name,
            logprobs=logp,
            old_logprobs=torch.zeros_like(adv),
            advantages=adv,
            loss_mask=mask,
            clip_low=clip_low,
            clip_high=clip_high,
            dual_clip_c=1e6,
        )
        (grad,) = torch.autograd.grad(loss, logp)
        n = len(tokens)
        for i, (kind, _, _) in enumerate(tokens):
            if kind == "inside":  # unclipped: d/dlogp (-A r) / n
                assert grad[0, i].item() == pytest.approx(-advs[i] * ratios[i] / n, rel=1e-6)
            else:
                assert grad[0, i].item() == 0.0


def test_unknown_policy_loss_names_choices():
    with pytest.raises(ValueError, match="dual_clip.*gspo.*ppo"):
        policy_loss(
            "trpo",
            logprobs=torch.zeros(1, 1),
            old_logprobs=torch.zeros(1, 1),
            advantages=torch.zeros(1, 1),
            loss_mask=torch.ones(1, 1),
        )


# ------------------------------------------------------------------------------------ IS weights


def test_truncated_is_weights_by_hand():
    old = leaf([[math.log(0.5), math.log(0.2), math.log(0.9)]])
    rollout = torch.tensor([[math.log(0.25), math.log(0.4), math.log(0.3)]])
    w = truncated_is_weights(old, rollout, cap=2.5)
    close(w, [[2.0, 0.5, 2.5]])  # 0.9 / 0.3 = 3 is capped
    assert not w.requires_grad


# ------------------------------------------------------------------------------------ value loss


def test_value_loss_by_hand():
    # t0: v - old = -.1, inside: 0.5 (1 - 1.5)^2 = .125
    # t1: v - old = -.3 -> v_clip = .6: 0.5 max(.25, .36) = .18 (clipped term wins, no grad)
    # t2: v - old = 1 -> v_clip = 1.2: 0.5 max(1, .04) = .5 (unclipped wins)
    # t3: masked
    v = leaf([[1.0, 0.5, 2.0, float("nan")]])
    old = torch.tensor([[1.1, 0.8, 1.0, 3.0]])
    ret = torch.tensor([[1.5, 0.0, 1.0, float("inf")]])
    mask = torch.tensor([[1.0, 1, 1, 0]])
    loss, m = value_loss(v, old, ret, mask, clip_range=0.2)
    close(loss, (0.125 + 0.18 + 0.5) / 3)
    loss.backward()
    close(v.grad, [[-0.5 / 3, 0, 1.0 / 3, 0]])
    assert m["vf_clipfrac"] == pytest.approx(1 / 3)


# ------------------------------------------------------------------------------------ entropy


def test_entropy_by_hand():
    logits = torch.tensor([[[0.0, math.log(3.0)], [1000.0, 1000.0]], [[5.0, 5.0], [-3.0, -3.0]]])
    h = entropy_from_logits(logits)
    p = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    close(h, [[p, math.log(2)], [math.log(2), math.log(2)]])  # 1000s stay finite


def test_entropy_matches_categorical():
    logits = (torch.randn(2, 3, 11, generator=torch.Generator().manual_seed(0)) * 4).requires_grad_(True)
    h = entropy_from_logits(logits)
    ref = torch.distributions.Categorical(logits=logits).entropy()
    close(h, ref.detach())
    (g,) = torch.autograd.grad(h.sum(), logits)
    (g_ref,) = torch.autograd.grad(ref.sum(), logits)
    close(g, g_ref)
