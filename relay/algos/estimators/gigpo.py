"""GiGPO (Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training"), for
multi-turn episodes with an outcome reward: a turn's tokens get the episode's group advantage plus
a step advantage among the group's rows that reached the same state before that turn:

    A(i, turn k) = A_episode(i) + step_weight * (r_i - mean_S) / (std_S + eps)

where S is the set of rows of i's group whose responses are token for token the same up to the
start of turn k (the same calls made, the same tool outputs read), and A_episode is GRPO's. A turn
is a run of model tokens (loss_mask 1); the observation tokens between turns are part of the state.

Why: GRPO credits every turn of an episode alike. When two rows of a group made the same first
call and read the same error, and only one then called again correctly, the first call is not what
set them apart; the step term credits the turn that did. Every row shares the state before its
first turn (the prompt), so the first turn's step term is the episode term again. A state only one
row reached has no one to compare with: its step term is 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from relay.algos.registry import EstimatorTraits

TRAITS = EstimatorTraits(needs_groups=True)


@dataclass(frozen=True)
class Hyperparameters:
    step_weight: float = 1.0  # the step term's weight beside the episode term (the paper's omega)
    eps: float = 1e-6  # added to a std, as in grpo

    def problems(self) -> dict[str, str]:
        p = {}
        if self.step_weight < 0:
            p["step_weight"] = f"must be >= 0, got {self.step_weight}"
        if self.eps <= 0:
            p["eps"] = f"must be > 0, got {self.eps}"
        return p


def turn_starts(mask_row) -> list[int]:
    """Indices where a run of model tokens begins in one row's loss mask."""
    starts, previous = [], 0.0
    for t, m in enumerate(mask_row.tolist()):
        if m > 0 and previous <= 0:
            starts.append(t)
        previous = m
    return starts


def advantages(hp: Hyperparameters, *, rewards, loss_mask, group_ids, responses=None):
    import torch

    from relay.algos.advantages import broadcast_rows, check_inputs, group_stats

    if responses is None or responses.shape != loss_mask.shape:
        raise ValueError("gigpo needs the response tokens [B,R] (responses=...) to find states shared across rows")
    with torch.no_grad():
        check_inputs(rewards, loss_mask, group_ids)
        r = rewards.to(loss_mask.dtype)
        mean, std, _ = group_stats(r, group_ids)
        adv = broadcast_rows((r - mean) / (std + hp.eps), loss_mask)
        # (row, start, end) of every turn, and the rows that reached each state before a turn
        turns, states = [], {}
        for i in range(loss_mask.shape[0]):
            starts = turn_starts(loss_mask[i])
            for k, start in enumerate(starts):
                end = starts[k + 1] if k + 1 < len(starts) else loss_mask.shape[1]
                state = (int(group_ids[i]), tuple(responses[i, :start].tolist()))
                states.setdefault(state, []).append(i)
                turns.append((i, start, end, state))
        for i, start, end, state in turns:
            rows = states[state]
            if len(rows) < 2:
                continue
            shared = r[rows]
            step = (r[i] - shared.mean()) / (shared.std() + hp.eps)
            adv[i, start:end] += hp.step_weight * step * loss_mask[i, start:end]
        return adv, broadcast_rows(r, loss_mask)
