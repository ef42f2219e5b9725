"""Scoring where the samples are: a plain reward function runs inside the rollout worker (no
EnvPool actor, no round trip); environments and task.reward_actor keep their EnvPool. The worker
is built in process here, as a plain class."""

import pickle
import threading

from actors.rollout import RolloutWorker
from relay.config import load_config
from relay.config.role_settings import RolloutSettings
from relay.envs.arithmetic import arithmetic_reward, make_rows
from relay_trainer.pools import actor_bundles, actor_roles
from relay_trainer.steps import count_failures


def test_only_environments_and_heavy_rewards_get_env_pool_actors():
    assert "env" not in actor_roles(load_config(None, []))
    assert list(actor_roles(load_config(None, ["task.reward_actor=true"]))) == ["env", "learner"]  # colocated
    separate = ["task.reward_actor=true", "resources.colocate=false"]
    assert list(actor_roles(load_config(None, separate))) == ["env", "rollout", "learner"]
    assert "env" in actor_roles(load_config("configs/textgame.yaml", []))
    # a Tune trial reserves exactly the bundles of the actors the run makes
    assert len(actor_bundles(load_config(None, []))) == 1
    assert len(actor_bundles(load_config(None, ["resources.colocate=false"]))) == 2


def test_the_worker_returns_its_samples_scored(tiny_model_path):
    worker = RolloutWorker(RolloutSettings.of(load_config(None, ["rollout.n=2"])), tiny_model_path, 0, num_threads=1)
    samples, metrics = worker.rollout(make_rows(3, 0, 2), step=0, first_group_id=0)
    assert len(samples) == 6 and metrics["rollout/reward_seconds"] >= 0
    assert [s.reward for s in samples] == [arithmetic_reward(s) for s in samples]
    assert all(s.reward_error is None for s in samples)
    assert count_failures(samples) == {"reward/errors": 0.0, "env/errors": 0.0}


def test_reward_errors_come_back_on_the_samples_and_are_counted(tiny_model_path):
    cfg = load_config(None, ["rollout.n=4", "task.reward_fn=tests.e2e.user_rewards:always_nan"])
    worker = RolloutWorker(RolloutSettings.of(cfg), tiny_model_path, worker_index=0, num_threads=1)
    samples, _ = worker.rollout(make_rows(2, 0, 2), step=0, first_group_id=0)
    assert all(s.reward == 0.0 and "reward is nan" in s.reward_error for s in samples)
    assert count_failures(samples)["reward/errors"] == 8.0


def test_a_sample_that_cannot_be_pickled_becomes_a_counted_record(tiny_model_path):
    """Model or environment data nested past the recursion limit (or an object no pickler takes)
    would fail the whole rollout's return inside Ray: that one episode is replaced and counted."""
    deep: list = []
    for _ in range(5_000):
        deep = [deep]
    worker = RolloutWorker(RolloutSettings.of(load_config(None, ["rollout.n=2"])), tiny_model_path, 0, num_threads=1)
    run = worker.agent.run

    def run_with_bad_data(*args, **kwargs):
        samples = run(*args, **kwargs)
        samples[1].tool_calls.append({"name": "f", "arguments": {"x": deep}, "ok": False, "error": "e", "turn": 0})
        samples[2].meta["env"] = {"infos": [threading.Lock()]}  # neither pickle nor cloudpickle takes it
        return samples

    worker.agent.run = run_with_bad_data
    samples, metrics = worker.rollout(make_rows(2, 0, 2), step=0, first_group_id=0)
    pickle.dumps((samples, metrics))  # what Ray does with the return value
    assert metrics["faults/unserializable_samples"] == 2.0
    bad, good = [samples[1], samples[2]], [samples[0], samples[3]]
    assert all("could not be serialized" in s.reward_error for s in bad)
    assert "recursion" in bad[0].meta["unserializable"] and bad[0].tool_calls[-1]["arguments"] is None
    assert "TypeError" in bad[1].meta["unserializable"] and "env" not in bad[1].meta
    assert all(s.reward_error is None and "unserializable" not in s.meta for s in good)
    assert [s.group_id for s in samples] == [0, 0, 1, 1] and bad[0].response_ids  # the tokens stay exact
    assert count_failures(samples)["reward/errors"] == 2.0  # never trained on (neutralized like a reward error)
