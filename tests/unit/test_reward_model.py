"""Reward models, the pure parts and the driver-side combination (no Ray): what the RM reads, verdict
parsing, running normalisation, and how scores and the rule reward combine (reward_model.*)."""

from __future__ import annotations

import math
import statistics

import pytest

from relay.config import ConfigError, load_config
from relay.config.role_settings import RewardPoolSettings
from relay.config.user_code import check_reward_fn, wants_rm_score
from relay.config.verdicts import VERDICT_PARSERS, parse_number, parse_yes_no, verdict_parser
from relay.envs.trajectory import reward_caller
from relay.rewards.reward_model import (
    RunningMeanStd,
    combine,
    conversation,
    judge_prompt,
    parse_verdict,
    score_metrics,
)
from relay.types import Sample
from relay_trainer.reward_model_pool import RewardModelPool
from tests.unit.rm_rewards import rule_plus_half_rm


def arithmetic_sample(answer: str, truth: str = "46", group_id: int = 0) -> Sample:
    return Sample(
        prompt_ids=[1, 2],
        response_text=answer,
        final_text=answer,
        ground_truth=truth,
        group_id=group_id,
        meta={"messages": [{"role": "system", "content": "Add."}, {"role": "user", "content": "12+34"}]},
    )


def test_conversation_is_the_prompt_messages_then_the_answer():
    s = arithmetic_sample("46")
    assert conversation(s) == [
        {"role": "system", "content": "Add."},
        {"role": "user", "content": "12+34"},
        {"role": "assistant", "content": "46"},
    ]


def test_conversation_of_an_environment_episode_alternates_actions_and_observations():
    s = Sample(prompt_ids=[1], response_text="ignored", meta={"messages": [{"role": "user", "content": "start"}]})
    s.meta["env"] = {"actions": ["go", "look"], "observations": ["a room", "done"]}
    assert conversation(s) == [
        {"role": "user", "content": "start"},
        {"role": "assistant", "content": "go"},
        {"role": "user", "content": "a room"},
        {"role": "assistant", "content": "look"},
    ]


def test_judge_prompt_fills_prompt_response_and_ground_truth():
    text = judge_prompt("Q: {prompt}\nA: {response}\nTrue: {ground_truth}\nScore 0-10:", arithmetic_sample("45"))
    assert text == "Q: 12+34\nA: 45\nTrue: 46\nScore 0-10:"


def test_verdict_parsers():
    assert parse_number("Score: 7") == 7.0
    assert parse_number("between 1 and 2.5") == 2.5
    assert parse_number("-3e-1") == -0.3
    assert parse_yes_no("  Yes, it is right") == 1.0 and parse_yes_no("no") == 0.0
    for parser, text in ((parse_number, "excellent!"), (parse_yes_no, "maybe")):
        with pytest.raises(ValueError, match="verdict"):
            parser(text)
    with pytest.raises(ValueError, match="not a finite number"):
        parse_verdict(lambda text: "7", "seven")
    assert parse_verdict("number", "7") == 7.0


def test_running_mean_std_equals_the_statistics_of_everything_seen():
    batches = [[1.0, 2.0, 4.0], [10.0, -3.0], [0.5] * 4]
    norm = RunningMeanStd()
    for batch in batches:
        out = norm.normalize(batch)
    seen = [v for b in batches for v in b]
    mean, std = statistics.fmean(seen), statistics.pstdev(seen)
    assert norm.count == len(seen) and math.isclose(norm.mean, mean) and math.isclose(norm.var, std**2)
    assert out == pytest.approx([(v - mean) / std for v in batches[-1]])
    again = RunningMeanStd()
    again.load_state_dict(norm.state_dict())
    assert again.state_dict() == norm.state_dict()


def test_combine_and_metrics():
    assert combine(1.0, 0.5, rule_weight=1.0, weight=2.0) == 2.0
    assert combine(1.0, 0.5, rule_weight=0.0, weight=1.0) == 0.5
    m = score_metrics([1.0, None, 3.0], errors=1)
    assert m == {"rm/score_mean": 2.0, "rm/score_std": 1.0, "rm/errors": 1.0}


def test_a_reward_function_with_rm_score_gets_it_by_keyword():
    assert wants_rm_score(rule_plus_half_rm) and check_reward_fn(rule_plus_half_rm) is None
    call = reward_caller(rule_plus_half_rm)
    s = arithmetic_sample("46")
    assert call(s, None) == 1.0  # no reward model score yet: the rule alone
    s.meta["rm_score"] = 2.0
    assert call(s, None) == 2.0

    def with_env(trajectory, environment, rm_score):
        return rm_score

    assert check_reward_fn(with_env) is None and reward_caller(with_env)(s, None) == 2.0


def pool(*overrides: str) -> RewardModelPool:
    return RewardModelPool(
        RewardPoolSettings.of(load_config(None, ["reward_model.path=tiny-rm", *overrides])), handles=[]
    )


def test_weights_combine_the_rule_reward_and_the_score():
    samples = [arithmetic_sample("46"), arithmetic_sample("36")]
    samples[0].reward, samples[1].reward = 1.0, 0.0
    metrics = pool("reward_model.weight=0.5").apply(samples, [2.0, -2.0], [None, None])
    assert [s.reward for s in samples] == [2.0, -1.0]
    assert [s.meta["rule_reward"] for s in samples] == [1.0, 0.0] and samples[1].meta["rm_score"] == -2.0
    assert metrics["rm/score_mean"] == 0.0 and metrics["rm/errors"] == 0 and metrics["reward/errors"] == 0
    assert metrics["rm/rule_reward_mean"] == 0.5


def test_rule_weight_zero_trains_on_the_reward_model_alone():
    samples = [arithmetic_sample("46"), arithmetic_sample("36")]
    samples[0].reward = 1.0
    pool("reward_model.rule_weight=0").apply(samples, [0.25, 0.75], [None, None])
    assert [s.reward for s in samples] == [0.25, 0.75]


def test_a_sample_the_reward_model_cannot_score_is_a_counted_reward_error(capsys):
    samples = [arithmetic_sample("46"), arithmetic_sample("36")]
    metrics = pool().apply(samples, [1.0, None], [None, "judge verdict: no number in the verdict 'great'"])
    assert samples[0].reward_error is None and samples[0].reward == 1.0
    assert samples[1].reward_error.startswith("reward model: judge verdict") and samples[1].reward == 0.0
    assert metrics["rm/errors"] == 1 and metrics["reward/errors"] == 1 and metrics["rm/score_mean"] == 1.0
    assert "reward error on episode" in capsys.readouterr().out


def test_normalize_standardises_the_scores_before_the_weight():
    samples = [arithmetic_sample("46") for _ in range(4)]
    pool("reward_model.normalize=true", "reward_model.rule_weight=0").apply(samples, [1.0, 2.0, 3.0, 4.0], [None] * 4)
    rewards = [s.reward for s in samples]
    assert statistics.fmean(rewards) == pytest.approx(0.0) and statistics.pstdev(rewards) == pytest.approx(1.0)


def test_the_running_score_statistics_travel_in_checkpoints():
    """reward_model.normalize: a resumed run normalises its next batch exactly as the first run did."""
    first, resumed = pool("reward_model.normalize=true"), pool("reward_model.normalize=true")
    first.apply([arithmetic_sample("46"), arithmetic_sample("36")], [3.0, -1.0], [None, None])
    resumed.load_state_dict(first.state_dict())
    a, b = [arithmetic_sample("46"), arithmetic_sample("36")], [arithmetic_sample("46"), arithmetic_sample("36")]
    first.apply(a, [0.5, 2.0], [None, None])
    resumed.apply(b, [0.5, 2.0], [None, None])
    assert [s.reward for s in a] == [s.reward for s in b]
    assert pool().state_dict() == {}  # nothing to keep without normalize


def test_a_reward_function_taking_rm_score_combines_it_itself():
    p = pool("task.reward_fn=tests.unit.rm_rewards:rule_plus_half_rm", "reward_model.weight=100")
    samples = [arithmetic_sample("46"), arithmetic_sample("36")]
    for s in samples:
        s.reward = reward_caller(rule_plus_half_rm)(s, None)  # the rule pass: rm_score is None
    p.apply(samples, [1.0, 4.0], [None, None])
    assert [s.reward for s in samples] == [1.5, 2.0]  # the function's value; reward_model.weight plays no part


def test_each_verdict_parser_is_declared_with_its_name_once():
    """The registry is the one list of names: the config check offers exactly its names, and a
    second parser under a taken name is refused where it is declared."""
    assert VERDICT_PARSERS == {"number": parse_number, "yes_no": parse_yes_no}
    judge = ["reward_model.path=tiny-rm", "reward_model.kind=judge", "reward_model.judge.template={response}"]
    with pytest.raises(ConfigError, match=r"reward_model.judge.parser: not one of \['number', 'yes_no'\]"):
        load_config(None, [*judge, "reward_model.judge.parser=numbr"])
    with pytest.raises(ValueError, match="declared twice"):
        verdict_parser("number")(lambda text: 0.0)
    assert VERDICT_PARSERS["number"] is parse_number


def test_reward_model_actor_repr_even_when_its_init_failed():
    from actors.reward_model import RewardModel

    assert repr(object.__new__(RewardModel)) == "RewardModel(reward_model-0, 0 samples scored, 0 errors)"
