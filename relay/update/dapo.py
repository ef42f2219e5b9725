"""DAPO's sample-level steps, taken in the driver on plain samples: the soft overlong punishment
and dynamic sampling's mixed groups. The math stays in relay.algos (tensors); torch is imported
here only when a run turns these options on, so the driver of any other run never loads it."""

from __future__ import annotations

from relay.types import Sample


def punish_overlong(samples: list[Sample], max_len: int, buffer_len: int, penalty_factor: float) -> None:
    """Add DAPO's soft overlong penalty (relay.algos.advantages.overlong_penalty) to each sample's reward."""
    import torch

    from relay.algos.advantages import overlong_penalty

    lengths = torch.tensor([float(s.num_model_tokens) for s in samples])
    for s, penalty in zip(samples, overlong_penalty(lengths, max_len, buffer_len, penalty_factor).tolist()):
        s.reward += penalty


def mixed_groups(samples: list[Sample]) -> list[bool]:
    """Per sample: does its group hold unequal rewards (relay.algos.advantages.mixed_group_mask)?"""
    import torch

    from relay.algos.advantages import mixed_group_mask

    rewards, group_ids = torch.tensor([s.reward for s in samples]), torch.tensor([s.group_id for s in samples])
    return mixed_group_mask(rewards, group_ids).tolist()
