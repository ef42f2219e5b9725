"""The Learner's class, used directly: a step whose loss is NaN is skipped, counted, and never
reaches the weights; the next good step trains."""

import torch

from actors.learner import Learner
from relay.config import load_config
from relay.config.role_settings import PolicySettings
from relay.types import Batch, Sample


def test_a_nan_loss_never_reaches_the_learners_weights(tiny_model_path):
    learner = Learner(PolicySettings.of(load_config(None, [])), tiny_model_path, num_threads=1)
    samples = [Sample([1, 5, 6], [10, 11, 2], [-1.0] * 3, [1, 1, 1], reward=r, group_id=0) for r in (0.0, 1.0)]
    batch = Batch.from_samples(samples, pad_id=0)
    batch.old_logprobs = learner.compute_logprobs(batch)
    before = {k: v.clone() for k, v in learner.model.state_dict().items()}
    batch.advantages = torch.full_like(batch.loss_mask, float("nan"))
    metrics = learner.update(batch)
    assert metrics["actor/skipped_steps"] == 1.0 and metrics["actor/skipped_nonfinite_loss"] == 1.0
    assert all(torch.equal(before[k], v) for k, v in learner.model.state_dict().items())
    batch.advantages = torch.tensor([[-1.0] * 3, [1.0] * 3])
    metrics = learner.update(batch)
    assert metrics["actor/optimizer_steps"] == 1.0
    assert all(v.isfinite().all() for v in learner.model.state_dict().values())
    assert any(not torch.equal(before[k], v) for k, v in learner.model.state_dict().items())
