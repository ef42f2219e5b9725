"""The update loop the Learner and the Critic share (relay/update/loop.py)."""

import math

import pytest
import torch

from relay.algos.losses import aggregate
from relay.config import TrainingConfig, load_config
from relay.config.role_settings import CriticSettings, PolicySettings
from relay.types import Batch, Sample
from relay.update.loop import mini_batch_indices, run_update, shuffle_generator


def make_batch(rows: int = 8, first_group: int = 5) -> Batch:
    """Rows of different response lengths (so token and row weights differ), one group each."""
    g = torch.Generator().manual_seed(0)
    samples = []
    for i in range(rows):
        n = 1 + i % 4
        samples.append(
            Sample(
                prompt_ids=[1, 2 + i],
                response_ids=torch.randint(3, 20, (n,), generator=g).tolist(),
                loss_mask=[1] * n,
                rollout_logprobs=[0.0] * n,
                reward=float(i),
                group_id=first_group + i,
            )
        )
    return Batch.from_samples(samples, pad_id=0)


class TokenRegressor(torch.nn.Module):
    """One scalar per response token, fitted to the row's reward."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(20, 4)
        self.head = torch.nn.Linear(4, 1)

    def loss_fn(self, agg_mode: str):
        def loss(micro: Batch):
            pred = self.head(self.embed(micro.responses)).squeeze(-1)  # [B,R]
            value = aggregate((pred - micro.rewards[:, None]).square(), micro.loss_mask, agg_mode)
            return value, {"loss": float(value.detach())}

        return loss


@pytest.mark.parametrize("agg_mode", ["token-mean", "seq-mean-token-mean"])
def test_micro_batches_accumulate_the_gradient_of_the_whole_mini_batch(agg_mode):
    batch, results = make_batch(), []
    for micro_batch_size in (1, 3, len(batch)):  # 8 micro-batches, 3 uneven ones, one
        model = TokenRegressor()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        training = TrainingConfig(ppo_epochs=1, mini_batches=1, micro_batch_size=micro_batch_size, grad_clip=1e9)
        metrics = run_update(
            model,
            optimizer,
            batch,
            model.loss_fn(agg_mode),
            training,
            seed=0,
            weight_by_tokens=agg_mode == "token-mean",
        )
        results.append((metrics["grad_norm"], [p.detach().clone() for p in model.parameters()]))
    (norm, params), rest = results[-1], results[:-1]
    for other_norm, other_params in rest:
        assert other_norm == pytest.approx(norm, rel=1e-5)
        assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(other_params, params))


def test_one_mini_batch_keeps_the_order_and_draws_nothing():
    generator = shuffle_generator(3, make_batch())
    state = generator.get_state()
    (only,) = mini_batch_indices(8, 1, generator)
    assert torch.equal(only, torch.arange(8)) and torch.equal(generator.get_state(), state)


def test_learner_and_critic_shuffle_mini_batches_by_the_same_rule(tiny_model_path):
    from actors.critic import Critic
    from actors.learner import Learner

    cfg = load_config(
        None,
        [
            "algorithm.estimator=gae",
            "critic.enabled=true",
            "run.seed=11",
            "training.ppo_epochs=2",
            "training.mini_batches=2",
            "training.micro_batch_size=2",
        ],
    )
    batch = make_batch()
    # The rule: seed = run.seed + first group id; each epoch one randperm, chunked into mini-batches.
    generator = torch.Generator().manual_seed(11 + 5)
    expected = [int(i) + 5 for _ in range(2) for i in torch.randperm(len(batch), generator=generator)]
    assert expected[:8] != sorted(expected[:8])  # shuffled, not the batch's own order

    def seen_groups(actor) -> list[int]:
        """The group ids of the rows each micro-batch's loss saw, in order, over one update."""
        seen, loss = [], actor._loss

        def recording_loss(micro: Batch):
            seen.extend(micro.group_ids.tolist())
            return loss(micro)

        actor._loss = recording_loss
        actor.update(batch)
        return seen

    learner = Learner(PolicySettings.of(cfg), tiny_model_path, num_threads=1)
    batch.old_logprobs = learner.compute_logprobs(batch)
    batch.advantages = batch.rewards[:, None] * batch.loss_mask
    critic = Critic(CriticSettings.of(cfg), tiny_model_path, num_threads=1)
    batch.values = critic.compute_values(batch)
    batch.returns = batch.advantages
    assert seen_groups(learner) == expected
    assert seen_groups(critic) == expected


@pytest.mark.parametrize("bad", ["loss", "grad"])
def test_a_non_finite_step_is_skipped_and_never_reaches_the_weights(bad):
    batch, model = make_batch(), TokenRegressor()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    before = [p.detach().clone() for p in model.parameters()]
    good = model.loss_fn("token-mean")

    def poisoned(micro: Batch):
        value, metrics = good(micro)
        if bad == "loss":
            return value * float("nan"), metrics
        return value + torch.sqrt(model.head.bias.sum() * 0.0), metrics  # a finite loss with a NaN gradient

    training = TrainingConfig(ppo_epochs=2, mini_batches=2, micro_batch_size=4)
    metrics = run_update(model, optimizer, batch, poisoned, training, seed=0)
    assert metrics["skipped_steps"] == 4.0 and metrics["optimizer_steps"] == 0.0
    assert metrics["skipped_nonfinite_loss" if bad == "loss" else "skipped_nonfinite_grad_norm"] == 4.0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert optimizer.state_dict()["state"] == {}  # no moments from a poisoned step either
    metrics = run_update(model, optimizer, batch, good, training, seed=0)  # the next good step trains
    assert metrics["optimizer_steps"] == 4.0 and all(math.isfinite(p.sum().item()) for p in model.parameters())
