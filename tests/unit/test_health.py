"""The health rules (relay/health/) on synthetic metric sequences whose numbers are worked by hand
in the comments, the batch signals read off samples, the monitor's alarms, and health.* checks."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from relay.config import load_config
from relay.config.health import RULES, HealthConfig, validate_health
from relay.health import HealthMonitor, batch_signals, held_out_sample
from relay.health.rules import RULE_FUNCTIONS
from relay.health.signals import correlation
from relay.run import metric_keys as keys
from relay.run.stop import HealthStopped, health_stop_line
from relay.types import Sample

REPO = Path(__file__).resolve().parents[2]


def run(steps: list[dict], cfg: HealthConfig | None = None, eval_before: dict | None = None):
    """Each step's health metrics and the lines printed, feeding `steps` in order."""
    lines: list[str] = []
    monitor = HealthMonitor(cfg or HealthConfig(), eval_before, say=lines.append)
    outs = [monitor.observe(i + 1, m) for i, m in enumerate(steps)]
    return outs, lines, monitor


def fired(outs: list[dict], rule: str) -> list[int]:
    """The 1-based steps at which `rule`'s alarm began."""
    return [i + 1 for i, out in enumerate(outs) if keys.health_fired(rule) in out]


def test_every_rule_has_a_function_and_a_name():
    assert tuple(RULE_FUNCTIONS) == RULES


def test_reward_collapse():
    # recent level 0.8 (5 steps); 0.3 is a drop of 0.5 = 62.5% of it; the batch mean's standard
    # error 0.4 / sqrt(64) = 0.05, 3 of them 0.15 <= 0.5: it trips
    steps = [{keys.REWARD_MEAN: 0.8, keys.REWARD_STD: 0.4, keys.EPISODES: 64}] * 5
    outs, lines, _ = run([*steps, {keys.REWARD_MEAN: 0.3, keys.REWARD_STD: 0.4, keys.EPISODES: 64}])
    assert fired(outs, "reward_collapse") == [6]
    assert outs[-1][keys.health_value("reward_collapse")] == pytest.approx(0.625)
    assert lines == [
        "relay: health: step 6: reward_collapse: reward/mean 0.3, down 62% from its mean 0.8 over the last 5 steps "
        "(health.reward_collapse=0.5)"
    ]
    # 4 episodes: standard error 0.5 / 2 = 0.25, 3 of them 0.75 > the drop of 0.5: noise, no alarm
    small = [{keys.REWARD_MEAN: 0.8, keys.REWARD_STD: 0.5, keys.EPISODES: 4}] * 5
    outs, lines, _ = run([*small, {keys.REWARD_MEAN: 0.3, keys.REWARD_STD: 0.5, keys.EPISODES: 4}])
    assert not lines and outs[-1][keys.HEALTH_ALARMS] == 0
    # a healthy dip: 0.8 -> 0.6 is 25% < 50%
    outs, lines, _ = run([*steps, {keys.REWARD_MEAN: 0.6, keys.REWARD_STD: 0.4, keys.EPISODES: 64}])
    assert outs[-1][keys.health_value("reward_collapse")] == pytest.approx(0.25) and not lines


def test_entropy_collapse_is_a_fall_against_the_recent_level():
    # 0.02 / mean(0.1, 0.1) = 0.2 <= 0.3; then 0.05 / mean(0.1, 0.1, 0.02) = 0.05 / 0.0733 = 0.68
    outs, lines, _ = run([{keys.ENTROPY: 0.1}, {keys.ENTROPY: 0.1}, {keys.ENTROPY: 0.02}, {keys.ENTROPY: 0.05}])
    assert fired(outs, "entropy_collapse") == [3]
    assert outs[2][keys.health_value("entropy_collapse")] == pytest.approx(0.2)
    assert outs[3][keys.health_value("entropy_collapse")] == pytest.approx(0.05 / (0.22 / 3))
    assert outs[3][keys.HEALTH_ALARMS] == 0  # over: counted at the step it held only
    assert "actor/entropy 0.02 is 20% of its mean 0.1 over the last 2 steps" in lines[0]


def test_length_collapse():
    outs, _, _ = run([{keys.RESPONSE_LENGTH: 40.0}] * 4 + [{keys.RESPONSE_LENGTH: 10.0}])  # 10 / 40 = 0.25 <= 0.3
    assert fired(outs, "length_collapse") == [5]
    assert outs[-1][keys.health_value("length_collapse")] == pytest.approx(0.25)


def test_kl_acceleration_needs_the_jump_and_a_kl_worth_the_name():
    cfg = HealthConfig(window=3)
    # 0.08 / mean(0.02, 0.02, 0.02) = 4 >= 3, and 0.08 >= kl_min 0.05
    outs, _, _ = run([{keys.KL_MEAN: 0.02}] * 3 + [{keys.KL_MEAN: 0.08}], cfg)
    assert fired(outs, "kl_acceleration") == [4]
    assert outs[-1][keys.health_value("kl_acceleration")] == pytest.approx(4.0)
    # from 0 at the first step (the reference is the policy) to 0.01: a large factor, a tiny KL
    outs, lines, _ = run([{keys.KL_MEAN: 0.0}, {keys.KL_MEAN: 0.01}], cfg)
    assert not lines


def test_length_blowup_alarms_only_after_a_healthy_step():
    outs, _, _ = run([{keys.TRUNCATED_FRAC: 0.1}, {keys.TRUNCATED_FRAC: 0.95}, {keys.TRUNCATED_FRAC: 1.0}])
    assert fired(outs, "length_blowup") == [2]  # once, as it begins
    assert [o[keys.HEALTH_ALARMS] for o in outs] == [0, 1, 1]  # counted while it holds
    # a run cut at the cap from its first step is how that task is: never on the healthy side, no alarm
    outs, lines, _ = run([{keys.TRUNCATED_FRAC: 0.95}] * 3)
    assert not lines and outs[-1][keys.health_value("length_blowup")] == 0.95


def test_repeated_response_and_logprob_gap_are_levels():
    outs, _, _ = run(
        [{keys.TOP_RESPONSE_SHARE: 0.125, keys.GROUPS: 8}, {keys.TOP_RESPONSE_SHARE: 0.75, keys.GROUPS: 8}]
    )
    assert fired(outs, "repeated_response") == [2]
    # 2 of 4 prompts sharing an answer is half the groups, but too few to call a takeover
    outs, _, _ = run([{keys.TOP_RESPONSE_SHARE: 0.25, keys.GROUPS: 4}, {keys.TOP_RESPONSE_SHARE: 0.5, keys.GROUPS: 4}])
    assert fired(outs, "repeated_response") == []
    outs, _, _ = run([{keys.LOGPROB_GAP: 1e-6}, {keys.LOGPROB_GAP: 0.2}])
    assert fired(outs, "logprob_gap") == [2]


def test_zero_advantage_fires_after_its_steps_in_a_row():
    # zero_adv_steps 3, 16 groups a step: the shares 0.5, 1, 1, 1: the third 1 in a row (step 4) fires
    outs, lines, _ = run([{keys.ZERO_ADV_GROUPS: v, keys.GROUPS: 16} for v in (0.5, 1.0, 1.0, 1.0)])
    assert fired(outs, "zero_advantage") == [4]
    assert "at least 1 for 3 steps" in lines[0]


def test_zero_advantage_leaves_groups_that_solved_their_prompt_out():
    # every group equal for 4 steps; from step 2 on a quarter of them solved in every episode: no
    # alarm, the signal left the solved groups because the task is learnt there
    solved = (0.0, 0.25, 0.25, 0.25)
    steps = [{keys.ZERO_ADV_GROUPS: 1.0, keys.SOLVED_GROUPS: s, keys.GROUPS: 16} for s in solved]
    outs, _, _ = run(steps)
    assert fired(outs, "zero_advantage") == []
    assert outs[-1]["health/zero_advantage"] == 0.75
    # solved everywhere (a run that learnt the task) is no alarm either; stuck everywhere is
    outs, _, _ = run([{keys.ZERO_ADV_GROUPS: 1.0, keys.SOLVED_GROUPS: 1.0, keys.GROUPS: 16}] * 4)
    assert fired(outs, "zero_advantage") == []
    outs, _, _ = run([{keys.ZERO_ADV_GROUPS: 1.0, keys.SOLVED_GROUPS: 0.0, keys.GROUPS: 16}] * 4)
    assert fired(outs, "zero_advantage") == [3]


def test_zero_advantage_waits_for_its_minimum_of_groups():
    # 4 groups a step: 3 steps hold 12 < zero_adv_min_groups=16 groups; the fourth step makes 16
    outs, lines, _ = run([{keys.ZERO_ADV_GROUPS: v, keys.GROUPS: 4} for v in (0.5, 1.0, 1.0, 1.0, 1.0)])
    assert fired(outs, "zero_advantage") == [5]
    assert "at least 1 for 4 steps" in lines[0]


def test_reward_collapse_of_a_rare_success_is_noise():
    # 0.03 of 32 episodes succeed, then none: the batch that fell has no spread, the steps before it
    # do (0.17), and a drop of 0.03 is within 3 of their standard errors (3 x 0.17 / sqrt(32) = 0.09)
    steps = [{keys.REWARD_MEAN: 0.031, keys.REWARD_STD: 0.17, keys.EPISODES: 32}]
    outs, lines, _ = run([*steps, {keys.REWARD_MEAN: 0.0, keys.REWARD_STD: 0.0, keys.EPISODES: 32}])
    assert not lines and outs[-1][keys.health_value("reward_collapse")] == pytest.approx(1.0)


def test_tool_rate_collapse_with_its_poisson_guard():
    cfg = HealthConfig(window=2)
    # 0.2 / 1.0 = 0.2 <= 0.25; 100 episodes: the count fell by 80 >= 3 x sqrt(100) = 30
    steps = [{keys.TOOL_CALLS_PER_EPISODE: 1.0, keys.EPISODES: 100}] * 2
    outs, _, _ = run([*steps, {keys.TOOL_CALLS_PER_EPISODE: 0.2, keys.EPISODES: 100}], cfg)
    assert fired(outs, "tool_rate_collapse") == [3]
    # 4 episodes: a fall of 3.2 calls < 3 x sqrt(4) = 6: could be chance
    few = [{keys.TOOL_CALLS_PER_EPISODE: 1.0, keys.EPISODES: 4}] * 2
    outs, lines, _ = run([*few, {keys.TOOL_CALLS_PER_EPISODE: 0.2, keys.EPISODES: 4}], cfg)
    assert not lines


def test_rm_divergence_averages_the_correlation_over_the_window():
    # window 2: mean(0.8, 0.0) = 0.4 > 0.1; mean(0.0, -0.2) = -0.1 <= 0.1 at step 3
    outs, _, _ = run([{keys.RM_RULE_CORRELATION: r} for r in (0.8, 0.0, -0.2)], HealthConfig(window=2))
    assert fired(outs, "rm_divergence") == [3]
    assert outs[-1][keys.health_value("rm_divergence")] == pytest.approx(-0.1)


def test_reward_hacking_against_held_out_accuracy():
    cfg = HealthConfig(window=2)
    before = {"eval/accuracy": 0.5}
    # the reward before training is the first step's, 0.2; at step 2 the recent level is
    # mean(0.2, 0.6) = 0.4: a rise of 0.2 >= 0.1 while held-out went 0.5 -> 0.45 (-0.05 <= 0)
    steps = [{keys.REWARD_MEAN: 0.2}, {keys.REWARD_MEAN: 0.6, "eval/accuracy": 0.45}]
    outs, lines, _ = run(steps, cfg, before)
    assert fired(outs, "reward_hacking") == [2]
    assert outs[-1][keys.health_value("reward_hacking")] == pytest.approx(0.25)  # 0.2 - (-0.05)
    assert "reward 0.2 -> 0.4 while held-out 0.5 -> 0.45 since step 0" in lines[0]
    # held-out rising with the reward: learning
    steps[1]["eval/accuracy"] = 0.6
    assert not run(steps, cfg, before)[1]


def test_reward_hacking_measured_from_the_best_held_out_point_across_a_slow_slide():
    # window 1: the reward climbs 0.06 between evaluations (under the 0.1 rise) while held-out
    # accuracy slides 0.9 -> 0.8 -> 0.7; against the best point (step 0, reward 0.2) the rise is
    # 0.12 at step 2 and held-out fell 0.2 > health.hacking_fall
    steps = [
        {keys.REWARD_MEAN: 0.2},
        {keys.REWARD_MEAN: 0.26, "eval/accuracy": 0.8},
        {keys.REWARD_MEAN: 0.32, "eval/accuracy": 0.7},
    ]
    outs, lines, _ = run(steps, HealthConfig(window=1), {"eval/accuracy": 0.9})
    assert fired(outs, "reward_hacking") == [3]
    assert "reward 0.2 -> 0.32 while held-out 0.9 -> 0.7 since step 0" in lines[0] and "hacking_fall" in lines[0]
    # the same climb over a dip within the noise of a plateau (0.99 -> 0.985): no alarm
    steps[1]["eval/accuracy"], steps[2]["eval/accuracy"] = 0.985, 0.985
    assert not run(steps, HealthConfig(window=1), {"eval/accuracy": 0.99})[1]


def test_reward_hacking_at_a_solved_held_out_set_needs_a_fall_past_hacking_fall():
    # held-out solved (1.0) at step 1; the reward keeps rising while one episode in 64 slips:
    # nothing could rise there, so only a fall of more than hacking_fall (0.02) is a hacked reward
    steps = [{keys.REWARD_MEAN: 1.1, "eval/accuracy": 1.0}, {keys.REWARD_MEAN: 1.3, "eval/accuracy": 0.984}]
    assert not run(steps, HealthConfig(window=1), {"eval/accuracy": 0.8})[1]
    steps[1]["eval/accuracy"] = 0.95
    outs, lines, _ = run(steps, HealthConfig(window=1), {"eval/accuracy": 0.8})
    assert fired(outs, "reward_hacking") == [2] and "held-out 1 -> 0.95 since step 1" in lines[0]


def test_reward_hacking_against_the_rule_reward():
    # window 2, a reward model: reward mean(0.5, 0.5) - mean(0.1, 0.1) = 0.4 up, the rule reward
    # mean(0.5, 0.4) - mean(0.5, 0.5) = -0.05: it trips at step 4, the first with two windows
    rewards, rules = (0.1, 0.1, 0.5, 0.5), (0.5, 0.5, 0.5, 0.4)
    steps = [{keys.REWARD_MEAN: r, keys.RM_RULE_REWARD_MEAN: q} for r, q in zip(rewards, rules)]
    outs, _, _ = run(steps, HealthConfig(window=2))
    assert fired(outs, "reward_hacking") == [4]
    assert outs[-1][keys.health_value("reward_hacking")] == pytest.approx(0.45)


def test_final_held_out_check():
    lines: list[str] = []
    monitor = HealthMonitor(HealthConfig(window=2), {"eval/accuracy": 0.5}, say=lines.append)
    for i, r in enumerate((0.2, 0.6, 0.6)):
        monitor.observe(i + 1, {keys.REWARD_MEAN: r})
    # the last two steps' level 0.6 against the first step's 0.2, held-out 0.5 -> 0.5
    assert [a["rule"] for a in monitor.final({"eval/accuracy": 0.5}, 3)] == ["reward_hacking"]
    assert lines[0].startswith("relay: health: step 3 after training: reward_hacking: reward 0.2 -> 0.6")
    assert monitor.final({"eval/accuracy": 0.9}, 3) == []


def test_stop_on_halts_at_the_step_it_fires():
    cfg = HealthConfig(stop_on=("entropy_collapse",))
    lines: list[str] = []
    monitor = HealthMonitor(cfg, say=lines.append)
    monitor.observe(1, {keys.ENTROPY: 0.1})
    assert monitor.halt is None
    monitor.observe(2, {keys.ENTROPY: 0.01})
    assert monitor.halt == "entropy_collapse"
    assert lines[0].endswith("; stopping after this step's checkpoint (health.stop_on)")


def test_health_stop_line_names_the_rule_and_the_resume_command(tmp_path):
    run_dir = tmp_path / "tiny-grpo"
    line = health_stop_line(HealthStopped("reward_collapse", 2, run_dir), ["training.lr=3e-2"])
    assert line.startswith("relay: health: stopped after step 2: health rule reward_collapse fired at step 2")
    assert line.endswith("resume: python driver.py --resume training.lr=3e-2 run.name=tiny-grpo")


def test_disabled_and_ignored_rules():
    collapse = [{keys.ENTROPY: 0.1}, {keys.ENTROPY: 0.01}]
    assert run(collapse, HealthConfig(enabled=False))[0] == [{}, {}]
    outs, lines, _ = run(collapse, HealthConfig(ignore=("entropy_collapse",)))
    assert not lines and keys.health_value("entropy_collapse") not in outs[-1]


def test_state_dict_carries_the_history_across_a_resume():
    first = HealthMonitor(HealthConfig(), say=lambda line: None)
    first.observe(1, {keys.ENTROPY: 0.1})
    resumed = HealthMonitor(HealthConfig(), state=first.state_dict(), say=lambda line: None)
    assert resumed.observe(2, {keys.ENTROPY: 0.01})[keys.HEALTH_ALARMS] == 1


def test_non_finite_values_are_skipped():
    outs, lines, _ = run([{keys.ENTROPY: 0.1}, {keys.ENTROPY: math.nan}, {keys.ENTROPY: 0.09}])
    assert not lines and keys.health_value("entropy_collapse") not in outs[1]


def sample(group: int, text: str, reward: float, finish: str = "stop", calls: int = 0, **meta) -> Sample:
    return Sample(
        prompt_ids=[1],
        group_id=group,
        final_text=text,
        reward=reward,
        finish_reason=finish,
        tool_calls=[{"ok": True}] * calls,
        meta=meta,
    )


def test_batch_signals():
    samples = [
        sample(0, "1", 1.0),
        sample(0, "1", 1.0),  # all equal
        sample(1, "2", 0.0, calls=2),
        sample(1, "1 ", 1.0, finish="length"),  # "1" once stripped: the group holds "1" too
        sample(2, "3", 0.0),
        sample(2, "3", 0.0, finish="budget"),  # all equal
        sample(3, "4", 1.0),
        sample(3, "4", 0.0),
    ]
    got = batch_signals(samples, tools=True)
    assert got == {
        keys.EPISODES: 8.0,
        keys.GROUPS: 4.0,
        keys.TRUNCATED_FRAC: 2 / 8,
        keys.TOP_RESPONSE_SHARE: 2 / 4,  # "1" is in groups 0 and 1 of 4
        keys.ZERO_ADV_GROUPS: 2 / 4,
        keys.SOLVED_GROUPS: 1 / 4,  # group 0: every episode reached the success threshold
        keys.TOOL_CALLS_PER_EPISODE: 2 / 8,
    }
    assert batch_signals(samples, success_threshold=0.0)[keys.SOLVED_GROUPS] == 1.0
    assert keys.TOOL_CALLS_PER_EPISODE not in batch_signals(samples)  # not a tool task
    assert batch_signals([]) == {}


def test_a_multi_turn_policy_is_one_repeated_string_only_when_every_turn_repeats():
    def game(group: int, turns: list[str]) -> Sample:
        return Sample(prompt_ids=[1], group_id=group, final_text=turns[-1], turn_texts=turns)

    # one strategy that reads each game's hints: the same winning last move, different episodes
    playing = [game(0, ["[5]", "[8]"]), game(1, ["[5]", "[3]", "[8]"]), game(2, ["[5]", "[7]", "[8]"])]
    assert batch_signals(playing)[keys.TOP_RESPONSE_SHARE] == pytest.approx(1 / 3)
    # the same episode whatever the game says: a takeover
    stuck = [game(g, ["[5]", "[5]", "[5]"]) for g in range(3)]
    assert batch_signals(stuck)[keys.TOP_RESPONSE_SHARE] == 1.0


def test_reward_model_correlation():
    assert correlation([(1, 1), (2, 2), (3, 3)]) == pytest.approx(1.0)
    # mean x 2, mean y 1/3: sum (x - 2)(y - 1/3) = (-1)(-1/3) + 0 + (1)(-1/3) = 0
    assert correlation([(1, 0), (2, 1), (3, 0)]) == pytest.approx(0.0)
    assert correlation([(1, 1), (2, 1), (3, 1)]) is None  # the rule reward is constant
    samples = [sample(i, "x", 0.0, rm_score=float(i), rule_reward=float(i % 2)) for i in range(4)]
    # scores 0..3 against rules 0,1,0,1: mean 1.5 and 0.5; sxy = 0.75 + (-0.25) + (-0.25) + 0.75 = 1,
    # sxx = 5, syy = 1: r = 1 / sqrt(5)
    assert batch_signals(samples)[keys.RM_RULE_CORRELATION] == pytest.approx(1 / math.sqrt(5))


def test_health_keys_load_and_validate():
    cfg = load_config(REPO / "configs/default.yaml", ["health.stop_on=[reward_collapse]", "health.window=3"])
    assert cfg.health.stop_on == ("reward_collapse",) and cfg.health.window == 3
    assert cfg.to_dict()["health"]["stop_on"] == ["reward_collapse"]
    bad = HealthConfig(window=0, stop_on=("nope",), repeat_share=1.5, kl_growth=1.0, logprob_gap=0.0, eval_rows=-1)
    problems = validate_health(bad)
    assert len(problems) == 6
    assert "health.eval_rows: must be >= 0 (0: every held-out row), got -1" in problems
    assert problems[0].startswith("health.stop_on: unknown rule 'nope'; the rules are reward_hacking, ")
    assert "health.window: must be >= 1, got 0" in problems
    assert "health.repeat_share: must be in (0, 1], got 1.5" in problems
    assert "health.kl_growth: must be > 1, got 1.0" in problems
    assert "health.logprob_gap: must be > 0, got 0.0" in problems
    assert validate_health(HealthConfig()) == []


def test_held_out_sample_is_fixed_and_in_order():
    rows = [{"i": i} for i in range(10)]
    sample = held_out_sample(rows, 4, seed=0)
    assert len(sample) == 4 and sample == held_out_sample(rows, 4, seed=0)
    assert [r["i"] for r in sample] == sorted(r["i"] for r in sample)
    assert held_out_sample(rows, 0, seed=0) is rows and held_out_sample(rows, 20, seed=0) is rows


def test_sampled_evaluations_compare_with_each_other_and_the_last_with_the_first():
    cfg = HealthConfig(window=2, eval_rows=64)
    before = {"eval/accuracy": 0.9}  # every row: not comparable with a sample's accuracy
    # step 2, the first sampled evaluation (0.5), starts the in-run comparisons: no alarm against 0.9
    steps = [{keys.REWARD_MEAN: 0.2}, {keys.REWARD_MEAN: 0.4, "eval/accuracy": 0.5}, {keys.REWARD_MEAN: 0.4}]
    # step 4: level mean(0.4, 0.8) = 0.6, up 0.3 from step 2's mean(0.2, 0.4) = 0.3, while 0.5 -> 0.5
    steps.append({keys.REWARD_MEAN: 0.8, "eval/accuracy": 0.5})
    lines: list[str] = []
    monitor = HealthMonitor(cfg, before, say=lines.append)
    outs = [monitor.observe(i + 1, m) for i, m in enumerate(steps)]
    assert fired(outs, "reward_hacking") == [4]
    assert "reward 0.3 -> 0.6 while held-out 0.5 -> 0.5 since step 2" in lines[0]
    # after training (every row): against the whole set before, 0.9, from the first step's reward 0.2
    assert monitor.final({"eval/accuracy": 0.95}, 4) == []
    assert monitor.final({"eval/accuracy": 0.9}, 4)[0]["line"].endswith(
        "reward_hacking: reward 0.2 -> 0.6 while held-out 0.9 -> 0.9 since step 0 "
        "(health.hacking_reward_rise=0.1, health.hacking_flat=0)"
    )


def test_a_solved_held_out_set_is_no_hacking():
    # the reward rises 0.2 while held-out stays at 1.0: it cannot rise, no alarm
    steps = [{keys.REWARD_MEAN: 0.2}, {keys.REWARD_MEAN: 0.6, "eval/accuracy": 1.0}]
    assert not run(steps, HealthConfig(window=2), {"eval/accuracy": 1.0})[1]


def test_zero_advantage_steps_beyond_the_kept_windows():
    cfg = HealthConfig(
        window=1, zero_adv_steps=4, zero_adv_min_groups=1
    )  # 2 x window = 2 values kept would never make 4
    outs, _, _ = run([{keys.ZERO_ADV_GROUPS: v} for v in (0.5, 1.0, 1.0, 1.0, 1.0)], cfg)
    assert fired(outs, "zero_advantage") == [5]


def test_reward_collapse_needs_a_level_above_the_noise():
    # normalised scores: recent level 0.07, std 1 over 128 episodes: 3 x 1 / sqrt(128) = 0.265 > 0.07
    steps = [{keys.REWARD_MEAN: 0.07, keys.REWARD_STD: 1.0, keys.EPISODES: 128}] * 5
    outs, lines, _ = run([*steps, {keys.REWARD_MEAN: -0.3, keys.REWARD_STD: 1.0, keys.EPISODES: 128}])
    assert not lines and outs[-1][keys.health_value("reward_collapse")] == pytest.approx(0.37 / 0.07)
