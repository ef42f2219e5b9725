"""RewardModel actors (reward_model.*): each scores the samples it is given with a classifier or a
generative judge (relay/rewards/scorers.py). The driver's side of them, which shards the samples,
normalises the scores and combines them into the rewards, is relay_trainer/reward_model_pool.py.
"""

from __future__ import annotations

from actors.plumbing import RelayActor
from relay.config.role_settings import RewardModelSettings
from relay.fault_points import hit
from relay.types import Sample


class RewardModel(RelayActor):
    repr_format = "reward_model-{index}, {calls} samples scored, {errors} errors"  # actors/plumbing.py
    index, calls, errors = 0, 0, 0

    def __init__(self, settings: RewardModelSettings, model_path: str, index: int = 0, num_threads: int = 1):
        import torch  # here: the driver reads this module's source (actor_class) and never loads torch

        torch.set_num_threads(num_threads)
        from relay.rewards.scorers import make_scorer

        self.index = index
        self.scorer = make_scorer(settings, model_path)

    def score(self, samples: list[Sample]) -> tuple[list[float | None], list[str | None]]:
        """One score per sample (None where it has none) and why it has none (None where it has one)."""
        hit("reward.model")
        scores, errors = self.scorer.score(samples)
        self.calls, self.errors = self.calls + len(samples), self.errors + sum(e is not None for e in errors)
        return scores, errors
