"""resources.colocate (actors/colocated.py): one actor is learner and rollout worker, generating
from the learner's own module. Plain classes, no Ray: the same batch gives the same samples and the
same update as the separate Learner and RolloutWorker; the update tags the weights' version; the learner's RNG
stream is untouched by rollouts; the one-call step is the rollout and the update."""

import pytest
import torch

from actors.colocated import ColocatedWorker
from actors.learner import Learner
from actors.rollout import RolloutWorker
from relay.algos.advantages import compute_advantages
from relay.config import ConfigError, load_config
from relay.config.role_settings import ColocatedSettings, PolicySettings, RolloutSettings
from relay.envs.scoring import trainable
from relay.run import metric_keys as keys
from relay.run.rows import task_rows
from relay.types import Batch

SMALL = ["training.prompts_per_step=4", "rollout.n=4", "training.micro_batch_size=8"]


def batch_of(samples) -> Batch:
    batch = Batch.from_samples(samples, pad_id=0)
    batch.advantages, batch.returns = compute_advantages(
        "grpo", rewards=batch.rewards, loss_mask=batch.loss_mask, group_ids=batch.group_ids
    )
    return batch


def test_colocated_worker_samples_and_updates_as_the_separate_actors_do(tiny_model_path):
    cfg = load_config(None, [*SMALL, "resources.colocate=true"])
    rows = task_rows(cfg.task, cfg.tools, cfg.run.seed)[0][:4]
    worker, learner = (
        RolloutWorker(RolloutSettings.of(cfg), tiny_model_path, 0, 1),
        Learner(PolicySettings.of(cfg), tiny_model_path, 1),
    )
    colocated = ColocatedWorker(ColocatedSettings.of(cfg), tiny_model_path, 1)
    assert colocated.worker.engine.model is colocated.learner.model  # one module, no copy

    for step in range(3):
        theirs, _ = worker.rollout(rows, step, first_group_id=0)  # seeds the global RNG (in its own process)
        rng = torch.get_rng_state()
        ours, metrics = colocated.rollout(rows, step, first_group_id=0)
        assert torch.equal(torch.get_rng_state(), rng)  # the learner's stream goes on as if no rollout ran
        assert [s.response_ids for s in ours] == [s.response_ids for s in theirs]
        assert [s.reward for s in ours] == [s.reward for s in theirs]  # scored in the actor
        assert {s.weight_version for s in ours} == {step}
        for a, b in zip(ours, theirs):
            assert torch.allclose(torch.tensor(a.rollout_logprobs), torch.tensor(b.rollout_logprobs), atol=1e-5)
        assert metrics["rollout/tokens"] == sum(s.num_model_tokens for s in ours)

        separate, together = learner.update(batch_of(theirs)), colocated.update(batch_of(ours))
        for key in ("actor/loss", "actor/pg_loss", "actor/grad_norm", "actor/entropy"):
            assert together[key] == pytest.approx(separate[key], rel=1e-5, abs=1e-7), key
        # the engine's logprobs are the trained module's own: the rollout/learner gap is float noise
        assert together["rollout/logprob_diff_max"] < 1e-5
        assert 0 <= together["rollout/logprob_diff_mean"] <= together["rollout/logprob_diff_max"]
        for (name, p), q in zip(colocated.learner.model.named_parameters(), learner.model.parameters()):
            assert torch.allclose(p, q, atol=1e-6), name

        worker.engine.update_weights(learner.model.state_dict(), step + 1)
        assert colocated.weight_version() == step + 1  # the update tagged the engine: no sync call


def test_one_call_step_is_the_rollout_then_the_update(tiny_model_path):
    cfg = load_config(None, [*SMALL, "resources.colocate=true"])
    rows = task_rows(cfg.task, cfg.tools, cfg.run.seed)[0][:4]
    settings = ColocatedSettings.of(cfg)
    two_calls, one_call = ColocatedWorker(settings, tiny_model_path, 1), ColocatedWorker(settings, tiny_model_path, 1)
    for step in range(3):
        theirs, their_rollout = two_calls.rollout(rows, step, first_group_id=0)
        their_update = two_calls.update(trainable(theirs), kl_coef=0.0)
        ours, our_rollout, our_update, seconds = one_call.rollout_and_update(rows, step, kl_coef=0.0)
        assert [s.response_ids for s in ours] == [s.response_ids for s in theirs]
        assert [s.reward for s in ours] == [s.reward for s in theirs]
        assert our_rollout["rollout/tokens"] == their_rollout["rollout/tokens"]
        for key in ("actor/loss", "actor/grad_norm", "reward/mean"):
            assert our_update[key] == their_update[key], key
        assert seconds[keys.ROLLOUT_S] > 0 and seconds[keys.UPDATE_S] >= our_update[keys.LEARNER_UPDATE_S]
        assert one_call.weight_version() == two_calls.weight_version() == step + 1
    for p, q in zip(one_call.learner.model.parameters(), two_calls.learner.model.parameters()):
        assert torch.equal(p, q)


@pytest.mark.parametrize(
    "overrides, line",
    [
        (["training.mode=async"], "it needs training.mode=sync, not async"),
        (
            ["rollout.engine=vllm"],
            "the vllm engine cannot generate from the learner's own module (engines that can: hf",
        ),
        (["resources.rollout.count=2", "training.prompts_per_step=4"], "it needs resources.rollout.count=1, not 2"),
        (["resources.learner.count=2"], "not an FSDP rank group (resources.learner.count=2"),
    ],
)
def test_colocate_refuses_what_cannot_share_one_module(overrides, line):
    with pytest.raises(ConfigError) as e:
        load_config(None, ["resources.colocate=true", *overrides])
    said = [p for p in e.value.problems if p.startswith("resources.colocate")]
    assert len(said) == 1 and line in said[0], e.value.problems
