"""The reference policy of a LoRA run: the learner's own base model with its adapters switched
off (Learner.compute_ref_logprobs). No Reference actor and no second copy of the weights."""

from __future__ import annotations

from actors.supervision import role_actors


class _RefLogprobs:
    def __init__(self, learner):
        self.learner = learner

    def remote(self, batch):
        return self.learner.compute_ref_logprobs.remote(batch)


class LearnerAsReference:
    """Stands where the Reference actor (or rank group) would: `compute_logprobs.remote(batch)`
    is the learner's (every rank's) `compute_ref_logprobs`. Not an actor of its own: the pools
    neither start nor kill it."""

    def __init__(self, learner):
        self.learner = learner
        self.compute_logprobs = _RefLogprobs(learner)

    def ray_actors(self) -> list:
        """The learner's actors (actors/supervision.py, role_actors): a hung reference pass is the learner's."""
        return role_actors(self.learner)

    def __repr__(self) -> str:
        return f"LearnerAsReference({self.learner!r})"
