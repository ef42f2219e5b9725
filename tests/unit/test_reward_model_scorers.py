"""The reward-model kinds in process (no Ray): the shipped classifier re-renders samples with its own
template and scores them in micro-batches; a generative judge's verdicts are parsed, and a
malformed one is an error, not a crash."""

from __future__ import annotations

import pytest
import torch

from relay.config import load_config
from relay.config.role_settings import RewardModelSettings
from relay.envs.arithmetic import make_rows
from relay.models.shipped import RM_NAME, shipped_model
from relay.rewards.scorers import ClassifierScorer, JudgeScorer
from relay.types import Sample


def sample(prompt: str, answer: str) -> Sample:
    return Sample(prompt_ids=[9, 9, 9], response_text=answer, meta={"messages": [{"role": "user", "content": prompt}]})


@pytest.fixture(scope="module")
def classifier():
    torch.set_num_threads(1)
    return ClassifierScorer(str(shipped_model(RM_NAME)), micro_batch_size=4)


def test_the_classifier_reads_its_own_rendering_never_the_policy_ids(classifier):
    s = sample("17+25", "42")
    ids = classifier.render(s)
    text = classifier.tokenizer.decode(ids)
    assert "17+25" in text and "42" in text and ids[:3] != [9, 9, 9]


def test_micro_batches_and_padding_do_not_change_scores(classifier):
    samples = [sample(r["prompt"], r["ground_truth"]) for r in make_rows(6, 5, 2)] + [sample("1+1", "2 and more")]
    batched, _ = classifier.score(samples)
    one_by_one = [classifier.score([s])[0][0] for s in samples]
    assert batched == pytest.approx(one_by_one, abs=1e-5)


def test_the_shipped_reward_model_prefers_right_sums_to_dropped_carries(classifier):
    """Better than chance, far from exact: tiny-rm orders 0.69 of these pairs right (docs/reward_models.md)."""
    rows = [r for r in make_rows(400, 11, 2) if sum(int(x) % 10 for x in r["prompt"].split("+")) >= 10]
    right, _ = classifier.score([sample(r["prompt"], r["ground_truth"]) for r in rows])
    wrong, _ = classifier.score([sample(r["prompt"], str(int(r["ground_truth"]) - 10)) for r in rows])
    assert sum(a > b for a, b in zip(right, wrong)) / len(rows) >= 0.62


def test_a_judge_on_the_hf_engine_and_its_malformed_verdicts(tiny_model_path):
    torch.set_num_threads(1)
    overrides = ["reward_model.path=tiny-rm", "reward_model.kind=judge", 'reward_model.judge.template="{prompt}"']
    judge = JudgeScorer(RewardModelSettings.of(load_config(None, overrides)), tiny_model_path)  # answers the sum
    samples = [sample("12+34", "x"), sample("20+5", "y")]
    scores, errors = judge.score(samples)
    assert errors == [None, None] and all(isinstance(v, float) for v in scores)
    yes_no = RewardModelSettings.of(load_config(None, [*overrides, "reward_model.judge.parser=yes_no"]))
    strict = JudgeScorer(yes_no, tiny_model_path)
    scores, errors = strict.score(samples)  # a number is neither yes nor no: counted errors, no exception
    assert scores == [None, None] and all(e.startswith("judge verdict: the verdict") for e in errors)
