"""task.name=reasoning_gym: a reply the dataset's verifier cannot read (prime_factorization's
score_answer raises ValueError on free text) is a wrong answer: reward 0.0, no reward error, trained
on, and counted (reward/unparsed), whether the rollout worker or an EnvPool scores it. A bad dataset
name still raises."""

import pickle

import pytest

from actors.env import EnvPool
from relay.config import load_config
from relay.envs.reasoning_gym import UNPARSED, generate, reasoning_gym_reward, unparsed_metrics
from relay.envs.scoring import Scorer, trainable
from relay.types import Sample
from relay_trainer.steps import count_failures

pytest.importorskip("reasoning_gym")


def replies(*texts: str) -> list[Sample]:
    (row,) = generate("prime_factorization", {}, 1, 0, "system")
    return [
        Sample(
            prompt_ids=[1],
            response_ids=[2, 3],
            loss_mask=[1, 1],
            group_id=0,
            final_text=t,
            ground_truth=row["ground_truth"],
        )
        for t in texts
    ]


def test_an_unparsable_reply_scores_zero_is_trained_on_and_counted():
    unparsed, right = replies("<answer>I don't know</answer>", "so it is\n<answer>2 × 433</answer>")
    rewards, errors, _ = Scorer(reasoning_gym_reward).score([unparsed, right])
    assert rewards == [0.0, 1.0] and errors == [None, None]
    assert unparsed.meta[UNPARSED].startswith("ValueError: invalid literal for int()") and UNPARSED not in right.meta
    unparsed.reward, right.reward = rewards
    assert trainable([unparsed, right])[0].loss_mask == [1, 1]  # a failure to learn from, not a dropped sample
    assert count_failures([unparsed, right]) == {"reward/errors": 0.0, "env/errors": 0.0, "reward/unparsed": 1.0}
    assert unparsed_metrics([unparsed, right], "eval/unparsed") == {"eval/unparsed": 1.0}
    assert unparsed_metrics([Sample(prompt_ids=[1], response_ids=[2], loss_mask=[1])], "reward/unparsed") == {}


def test_an_env_pool_sends_the_note_back_with_the_reward():
    pool = EnvPool(load_config(None, ["task.name=reasoning_gym", "task.dataset=prime_factorization"]).task)
    sent = replies("no idea", "<answer>2 × 433</answer>")
    rewards, errors, _, notes = pool.score(pickle.loads(pickle.dumps(sent)))  # the pool scores copies
    assert rewards == [0.0, 1.0] and errors == [None, None]
    assert list(notes[0]) == [UNPARSED] and notes[1] == {}


def test_a_bad_dataset_name_is_still_an_error():
    (sample,) = replies("<answer>2 × 433</answer>")
    sample.ground_truth = {**sample.ground_truth, "dataset": "nope"}
    with pytest.raises(ValueError, match="'nope' not registered"):
        reasoning_gym_reward(sample)
