"""Deadlines on the driver's calls to the learner, reference and critic (roles Ray does not
restart): a call that hangs past its deadline kills the actor (every rank of a rank group) for
good, is counted and logged, and stops the run as ActorLost, the path a dead learner takes (the
last checkpoint and the --resume command; resources.auto_resume resumes from it). A reward model
is restarted instead, and its shard scored again.

The hung actors are real Ray actors whose method sleeps far longer than the test runs."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
import ray

from actors.restarts import wait_restarted
from actors.supervision import ATTEMPTS_PER_CALL, Supervisor
from relay.config import load_config
from relay.config.role_settings import RewardPoolSettings
from relay.failures import ActorLost, CallRaised
from relay.types import Sample
from relay_trainer.checkpoints import save_training_checkpoint
from relay_trainer.learner_recovery import NoRecovery
from relay_trainer.lora_reference import LearnerAsReference
from relay_trainer.pools import Learner
from relay_trainer.rank_group import RankGroup
from relay_trainer.reward_model_pool import RewardModelPool

HANG_S = 300.0  # a hung call; every deadline here is a few seconds
DEADLINE_S = 1.5  # eight hangs are waited out below; a call that answers at once takes milliseconds


def slow_learner():
    """Made in a function: Ray pickles it by value (the workers cannot import this test module)."""

    class SlowLearner:
        """Learner-like: `update` hangs when told to, the other calls answer at once (or raise)."""

        def __init__(self, hang_in: str = "update"):
            self.hang_in = hang_in

        def _maybe_hang(self, method: str) -> None:
            if method == self.hang_in:
                time.sleep(HANG_S)

        def update(self, batch):
            self._maybe_hang("update")
            return {"actor/loss": 0.5}

        def compute_logprobs(self, batch):
            if batch == "bad":
                raise ValueError("a programming error in the learner")
            return [0.0]

        def compute_ref_logprobs(self, batch):
            self._maybe_hang("compute_ref_logprobs")
            return [0.0]

        def state(self, as_bytes=False):
            self._maybe_hang("state")
            return {}, {}

        def score(self, samples):
            self._maybe_hang("score")
            return [1.0] * len(samples), [None] * len(samples)

    return SlowLearner


def supervisor(lines: list) -> Supervisor:
    return Supervisor(60.0, log=lines.append, update_timeout_s=DEADLINE_S)


def make(hang_in: str = "update"):
    # max_restarts as a restartable role has: the deadline's kill must still be for good
    actor = ray.remote(slow_learner()).options(num_cpus=0.1, max_restarts=3).remote(hang_in)
    ray.get(actor.__ray_ready__.remote())  # started: a deadline of a few seconds never covers a slow start
    return actor


def is_dead(actor) -> bool:
    return not wait_restarted(actor, 5.0)


def test_a_learner_hung_in_update_is_killed_at_its_deadline_and_the_run_stops(shared_ray):
    lines, learner = [], make()
    faults = supervisor(lines)
    faults.names = {learner._actor_id: "run/learner-0"}
    assert faults.get(learner.compute_logprobs.remote("batch"), learner, "logprobs", long=True) == [0.0]
    # an error is not a hang: the run stops with its line, resumable (its state may be half-changed)
    with pytest.raises(CallRaised, match="logprobs raised ValueError: a programming error in the learner"):
        faults.get(learner.compute_logprobs.remote("bad"), learner, "logprobs", long=True)
    assert faults.get([], [], "nothing to wait for") == []
    assert not any(faults.take().values())

    start = time.monotonic()
    with pytest.raises(ActorLost) as lost:
        faults.get([learner.update.remote("batch")], [learner], "update", long=True)
    assert time.monotonic() - start < HANG_S  # returned before the hang would have ended
    assert (
        str(lost.value)
        == f"run/learner-0 update: no answer within {DEADLINE_S:g}s (resources.update_timeout_s); killed"
    )
    assert lines == [
        f"relay: fault: run/learner-0 update: no answer within {DEADLINE_S:g}s (resources.update_timeout_s); "
        "killing it, the run stops"
    ]
    assert faults.take()["faults/timeouts"] == 1.0
    assert is_dead(learner)  # killed for good: not restarted despite its max_restarts


def test_only_the_actors_of_the_calls_still_running_are_killed_every_rank_of_a_group(shared_ray):
    faults = supervisor([])
    critic, ranks = make(hang_in="none"), [make(), make()]
    learner = RankGroup(ranks, Learner)  # the Learner's fan-out, over two stand-in ranks
    updates = [learner.update.remote("batch"), critic.update.remote("batch")]
    with pytest.raises(ActorLost, match="update: no answer"):
        faults.get(updates, [learner, critic], "update", long=True)
    assert all(is_dead(rank) for rank in ranks) and not is_dead(critic)
    ray.kill(critic)


def test_a_lora_reference_hangs_in_its_learner_and_the_learner_is_killed(shared_ray):
    faults, learner = supervisor([]), make(hang_in="compute_ref_logprobs")
    reference = LearnerAsReference(learner)
    with pytest.raises(ActorLost, match="reference logprobs"):
        faults.get(reference.compute_logprobs.remote("batch"), reference, "reference logprobs", long=True)
    assert is_dead(learner)


def test_a_checkpoint_save_and_reward_model_scores_have_deadlines(shared_ray, tmp_path):
    faults, learner = supervisor([]), make(hang_in="state")
    actors = SimpleNamespace(learner=learner, critic=None, faults=faults, recovery=NoRecovery())
    with pytest.raises(ActorLost, match="checkpoint state"):
        save_training_checkpoint(actors, tmp_path / "checkpoints", 1, {"step": 1}, keep_last_n=2)
    assert is_dead(learner) and not list((tmp_path / "checkpoints").glob("step_*"))  # nothing half-written

    assert faults.take()["faults/timeouts"] == 1.0

    # a reward model is restarted (resources.max_restarts): each hang is killed at the deadline and
    # the shard sent again to the replacement, which hangs too, until the attempts run out
    judge = make(hang_in="score")
    pool = RewardModelPool(RewardPoolSettings.of(load_config(None, ["reward_model.path=tiny-rm"])), [judge], faults)
    with pytest.raises(ActorLost, match="reward_model-0 scores"):  # its max_restarts=3 run out first
        pool.score([Sample(prompt_ids=[1], response_ids=[2], loss_mask=[1])])
    counts = faults.take()
    assert counts["faults/timeouts"] == ATTEMPTS_PER_CALL and counts["faults/restarts"] == ATTEMPTS_PER_CALL - 1
