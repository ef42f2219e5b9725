"""Advantage estimators against numbers computed by hand, plus properties (hypothesis)."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.algos.advantages import compute_advantages, mixed_group_mask, overlong_penalty
from relay.algos.registry import ESTIMATORS
from relay.algos.utils import masked_mean, masked_whiten


def close(a, b, tol=1e-4):
    # Not torch.testing.assert_close: its first call imports torch.distributed (seconds).
    b = torch.as_tensor(b, dtype=a.dtype)
    assert a.shape == b.shape and torch.allclose(a, b, atol=tol, rtol=0, equal_nan=False), f"\n{a}\n!=\n{b}"


# Four rows: a group of three (ids 7) and a singleton (id 2). Some tokens masked: padding
# at the end of row 0/1, an observation token in the middle of row 2.
MASK = torch.tensor([[1.0, 1, 1, 0], [1, 1, 0, 0], [1, 0, 1, 1], [1, 1, 1, 1]])
GROUPS = torch.tensor([7, 7, 7, 2])
REWARDS = torch.tensor([1.0, 0.0, 0.0, 5.0])


def row_scalars(adv, mask=MASK):
    """Check an outcome advantage is constant over a row's model tokens; return it per row."""
    out = []
    for a, m in zip(adv, mask):
        vals = a[m > 0]
        assert torch.allclose(vals, vals[0].expand_as(vals))
        assert torch.all(a[m == 0] == 0)
        out.append(vals[0].item())
    return out


def test_grpo_by_hand():
    # group 7: mean 1/3, unbiased std sqrt(((2/3)^2 + 2 (1/3)^2) / 2) = sqrt(1/3)
    adv, ret = compute_advantages("grpo", rewards=REWARDS, loss_mask=MASK, group_ids=GROUPS)
    s = math.sqrt(1 / 3)
    assert row_scalars(adv) == pytest.approx([(2 / 3) / s, (-1 / 3) / s, (-1 / 3) / s, 0.0], abs=1e-4)
    assert row_scalars(ret) == pytest.approx([1, 0, 0, 5])


def test_dr_grpo_by_hand():
    adv, _ = compute_advantages("dr_grpo", rewards=REWARDS, loss_mask=MASK, group_ids=GROUPS)
    assert row_scalars(adv) == pytest.approx([2 / 3, -1 / 3, -1 / 3, 0.0], abs=1e-6)


def test_rloo_by_hand():
    # row 0: 1 - mean(0, 0) = 1; rows 1, 2: 0 - mean(1, 0) = -0.5; singleton: 0
    adv, _ = compute_advantages("rloo", rewards=REWARDS, loss_mask=MASK, group_ids=GROUPS)
    assert row_scalars(adv) == pytest.approx([1.0, -0.5, -0.5, 0.0], abs=1e-6)


def test_reinforce_plus_plus_by_hand():
    # gamma 0.5: row 0 rewards on model tokens [0, 1] -> returns [0.5, 1]; row 1 all zero.
    # Five model tokens [0.5, 1, 0, 0, 0]: mean 0.3, unbiased var 0.8 / 4 = 0.2.
    mask = torch.tensor([[1.0, 1, 0], [1, 1, 1]])
    adv, ret = compute_advantages(
        "reinforce_plus_plus",
        rewards=torch.tensor([1.0, 0.0]),
        loss_mask=mask,
        group_ids=torch.tensor([0, 1]),
        gamma=0.5,
    )
    close(ret, [[0.5, 1, 0], [0, 0, 0]])
    s = math.sqrt(0.2)
    close(adv, [[0.2 / s, 0.7 / s, 0], [-0.3 / s, -0.3 / s, -0.3 / s]])


def test_reward_to_go_skips_observation_tokens():
    # Model, obs, obs, model. One discount step between the two model tokens, not three; the
    # token reward 2 on the first observation is credited to the model token before it.
    mask = torch.tensor([[1.0, 0, 0, 1]])
    tr = torch.tensor([[0.0, 2.0, 0, 0]])
    _, ret = compute_advantages(
        "reinforce_plus_plus",
        rewards=torch.tensor([1.0]),
        loss_mask=mask,
        group_ids=torch.tensor([0]),
        token_rewards=tr,
        gamma=0.5,
    )
    close(ret, [[2 + 0.5 * 1, 0, 0, 1]])


def test_reinforce_plus_plus_baseline_by_hand():
    # r - group mean = [0.5, -0.5, -0.5, 0.5] broadcast over 2 tokens: eight values +-0.5,
    # mean 0, unbiased var 8 * 0.25 / 7 = 2/7.
    mask = torch.ones(4, 2)
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    adv, ret = compute_advantages(
        "reinforce_plus_plus_baseline", rewards=rewards, loss_mask=mask, group_ids=torch.tensor([0, 0, 1, 1])
    )
    a = 0.5 / math.sqrt(2 / 7)
    close(adv, [[a, a], [-a, -a], [-a, -a], [a, a]])
    close(ret, rewards[:, None].expand(4, 2))  # raw rewards, no baseline
    # An explicit baseline replaces the group mean.
    adv_b, _ = compute_advantages(
        "reinforce_plus_plus_baseline",
        rewards=rewards,
        loss_mask=mask,
        group_ids=torch.tensor([0, 0, 1, 1]),
        baseline=torch.zeros(4),
    )
    adv_pp, _ = compute_advantages("reinforce_plus_plus", rewards=rewards, loss_mask=mask, group_ids=torch.arange(4))
    close(adv_b, adv_pp, 1e-6)


def test_gae_by_hand_with_observation_token():
    # Row 0: model, model, obs, model; values [.1, .2, (9 under the mask), .3]; reward 1.
    #   t3: delta = 1 - .3 = .7                       A = .7
    #   t1: delta = .9 * .3 - .2 = .07                A = .07 + .72 * .7   = .574
    #   t0: delta = .9 * .2 - .1 = .08                A = .08 + .72 * .574 = .49328
    # Row 1: four model tokens, values 0, reward 2: A = 2 * .72^k from the end.
    mask = torch.tensor([[1.0, 1, 0, 1], [1, 1, 1, 1]])
    values = torch.tensor([[0.1, 0.2, 9.0, 0.3], [0, 0, 0, 0]])
    adv, ret = compute_advantages(
        "gae",
        rewards=torch.tensor([1.0, 2.0]),
        loss_mask=mask,
        group_ids=torch.tensor([0, 1]),
        values=values,
        gamma=0.9,
        lam=0.8,
    )
    close(adv, [[0.49328, 0.574, 0, 0.7], [2 * 0.72**3, 2 * 0.72**2, 2 * 0.72, 2]], 1e-5)
    close(ret, [[0.59328, 0.774, 0, 1.0], [2 * 0.72**3, 2 * 0.72**2, 2 * 0.72, 2]], 1e-5)


def test_gae_ignores_values_under_mask():
    mask = torch.tensor([[1.0, 0, 1, 0]])
    kw = dict(rewards=torch.tensor([1.0]), loss_mask=mask, group_ids=torch.tensor([0]), gamma=0.9, lam=0.95)
    a1, r1 = compute_advantages("gae", values=torch.tensor([[0.3, 0.0, 0.5, 0.0]]), **kw)
    a2, r2 = compute_advantages("gae", values=torch.tensor([[0.3, float("nan"), 0.5, 1e9]]), **kw)
    close(a1, a2, 0)
    close(r1, r2, 0)


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_empty_rows_and_singletons_give_zeros_not_nan(name):
    mask = torch.tensor([[0.0, 0, 0], [1, 1, 0], [1, 1, 1]])
    adv, ret = compute_advantages(
        name,
        rewards=torch.tensor([3.0, 1.0, 2.0]),
        loss_mask=mask,
        group_ids=torch.tensor([0, 1, 1]),
        values=torch.zeros(3, 3),
        token_rewards=torch.zeros(3, 3),
        responses=torch.zeros(3, 3, dtype=torch.long),
    )
    assert torch.isfinite(adv).all() and torch.isfinite(ret).all()
    assert torch.all(adv[mask == 0] == 0) and torch.all(ret[mask == 0] == 0)
    if name in ("grpo", "rloo", "dr_grpo"):  # a single-row group has nothing to compare with
        single, _ = compute_advantages(
            name, rewards=torch.tensor([3.0]), loss_mask=torch.ones(1, 2), group_ids=torch.tensor([4])
        )
        close(single, [[0.0, 0.0]], 0)


def test_gigpo_by_hand():
    # One group of three two-turn episodes: rows 0 and 1 made the same first call (token 5) and
    # read the same tool output (token 9), then row 0 called again right (reward 1) and row 1 did
    # not (0); row 2 made another first call (6) and failed. Layout: call, output, second call.
    mask = torch.tensor([[1.0, 0, 1], [1, 0, 1], [1, 0, 1]])
    responses = torch.tensor([[5, 9, 7], [5, 9, 8], [6, 9, 8]])
    rewards = torch.tensor([1.0, 0.0, 0.0])
    adv, ret = compute_advantages(
        "gigpo", rewards=rewards, loss_mask=mask, group_ids=torch.zeros(3), responses=responses
    )
    episode = (rewards - 1 / 3) / math.sqrt(1 / 3)  # grpo over the group
    step = 0.5 / math.sqrt(0.5)  # rows 0 and 1 share the state before turn 2: (1 - 0.5) / std(1, 0)
    # turn 1: every row shares the prompt, so its step term is the episode term again
    close(adv[:, 0], 2 * episode)
    close(adv[:, 1], [0.0, 0.0, 0.0])
    close(adv[:, 2], [episode[0] + step, episode[1] - step, episode[2]])  # row 2's state is its own
    close(ret, rewards[:, None] * mask)
    half, _ = compute_advantages(
        "gigpo", rewards=rewards, loss_mask=mask, group_ids=torch.zeros(3), responses=responses, step_weight=0.5
    )
    close(half[:, 2], [episode[0] + step / 2, episode[1] - step / 2, episode[2]])
    with pytest.raises(ValueError, match="response tokens"):
        compute_advantages("gigpo", rewards=rewards, loss_mask=mask, group_ids=torch.zeros(3))


def test_unknown_estimator_names_choices():
    with pytest.raises(ValueError, match="grpo.*rloo"):
        compute_advantages("ppo2", rewards=REWARDS, loss_mask=MASK, group_ids=GROUPS)


def test_gae_without_values_fails_loudly():
    with pytest.raises(ValueError, match="values"):
        compute_advantages("gae", rewards=REWARDS, loss_mask=MASK, group_ids=GROUPS)


# --------------------------------------------------------------------------------- properties

groups_strategy = st.integers(1, 12).flatmap(
    lambda B: st.tuples(
        st.lists(st.floats(-5, 5, allow_nan=False, width=32), min_size=B, max_size=B),
        st.lists(st.integers(0, 3), min_size=B, max_size=B),
    )
)


@pytest.mark.parametrize("name", ["grpo", "rloo", "dr_grpo"])
@settings(max_examples=60, deadline=None)
@given(data=groups_strategy)
def test_group_advantages_sum_to_zero_per_group(name, data):
    rewards, gids = torch.tensor(data[0]), torch.tensor(data[1])
    adv, _ = compute_advantages(name, rewards=rewards, loss_mask=torch.ones(len(rewards), 2), group_ids=gids)
    per_row = adv[:, 0]
    for g in gids.unique():
        sel, r = per_row[gids == g], rewards[gids == g]
        # In float32, r - mean carries rounding of order eps32 * max|r| per row, and grpo divides it
        # by the group's std: rewards near 5 that differ by 1e-3 sum to zero only within ~1e-3.
        # For well-separated groups this bound is tiny, so a wrong mean or std still fails it.
        scale = 1.0 / (r.std().item() + 1e-6) if name == "grpo" and len(r) > 1 else 1.0
        rounding = 8 * torch.finfo(torch.float32).eps * r.abs().max().item() * scale
        assert abs(sel.sum().item()) <= (1e-4 * max(1.0, sel.abs().max().item()) + rounding) * len(sel)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 4).flatmap(
        lambda B: st.integers(1, 6).flatmap(
            lambda R: st.tuples(
                st.lists(st.lists(st.booleans(), min_size=R, max_size=R), min_size=B, max_size=B),
                st.lists(st.lists(st.floats(-3, 3, width=32), min_size=R, max_size=R), min_size=B, max_size=B),
                st.lists(st.lists(st.floats(-3, 3, width=32), min_size=R, max_size=R), min_size=B, max_size=B),
                st.lists(st.floats(-3, 3, width=32), min_size=B, max_size=B),
            )
        )
    )
)
def test_gae_lambda1_gamma1_is_return_minus_value(data):
    mask, values, token_rewards, rewards = (torch.tensor(x, dtype=torch.float32) for x in data)
    adv, ret = compute_advantages(
        "gae",
        rewards=rewards,
        loss_mask=mask,
        group_ids=torch.zeros(len(rewards), dtype=torch.long),
        values=values,
        token_rewards=token_rewards,
        gamma=1.0,
        lam=1.0,
    )
    B, R = mask.shape
    for b in range(B):
        model = [t for t in range(R) if mask[b, t] > 0]
        if not model:
            assert torch.all(adv[b] == 0)
            continue
        # Undiscounted return from t: every reward at or after t (token rewards on observation
        # tokens after the first model token count too) plus the final reward.
        for t in model:
            g = token_rewards[b, t:].sum().item() + rewards[b].item()
            assert adv[b, t].item() == pytest.approx(g - values[b, t].item(), abs=1e-4)
            assert ret[b, t].item() == pytest.approx(g, abs=1e-4)


# --------------------------------------------------------------------------------- DAPO helpers


def test_mixed_group_mask_by_hand():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.5, 0.0, 0.0])
    gids = torch.tensor([0, 0, 1, 1, 2, 3, 3])
    # group 0 all 1, group 1 mixed, group 2 singleton, group 3 all 0
    assert mixed_group_mask(rewards, gids).tolist() == [False, False, True, True, False, False, False]


def test_overlong_penalty_by_hand():
    # max 10, buffer 4: free up to 6, then -1/4 per token, -1 from 10 on; scaled by 0.5
    lengths = torch.tensor([3, 6, 7, 8, 10, 12])
    close(overlong_penalty(lengths, 10, 4), [0, 0, -0.25, -0.5, -1, -1], 1e-6)
    close(overlong_penalty(lengths, 10, 4, penalty_factor=0.5), [0, 0, -0.125, -0.25, -0.5, -0.5], 1e-6)
    close(overlong_penalty(lengths, 10, 0), [0, 0, 0, 0, 0, -1], 1e-6)  # hard cutoff


def test_masked_helpers_by_hand():
    x = torch.tensor([[1.0, 2.0, float("nan")], [3.0, float("inf"), 5.0]])
    m = torch.tensor([[1.0, 1, 0], [1, 0, 1]])
    close(masked_mean(x, m), 11 / 4)
    close(masked_mean(x, m, dim=-1), [1.5, 4.0])
    close(masked_mean(x, torch.zeros_like(m)), 0.0, 0)
    # values 1, 2, 3, 5: mean 2.75, unbiased var (3.0625 + .5625 + .0625 + 5.0625) / 3 = 2.916...
    w = masked_whiten(x, m, eps=0.0)
    sd = math.sqrt(8.75 / 3)
    close(w, [[(1 - 2.75) / sd, (2 - 2.75) / sd, 0], [(3 - 2.75) / sd, 0, (5 - 2.75) / sd]])
