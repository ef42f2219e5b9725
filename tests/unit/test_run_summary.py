"""The run's closing line: an SFT-only run (training.steps=0) says it took no RL steps."""

import math

from relay.run.summary import summarize


def test_a_run_without_rl_steps_says_so_and_prints_no_nan_reward(tmp_path, capsys):
    after = {"eval/accuracy": 0.25}
    summary = summarize([], {}, after, tmp_path, after_sft=after)
    line = capsys.readouterr().out.strip()
    assert "no RL steps" in line and "nan -> nan" not in line and "(after SFT) -> 0.250" in line
    assert math.isnan(summary["reward_start"]) and summary["accuracy_after_sft"] == 0.25


def test_a_run_with_rl_steps_prints_its_reward_start_and_end(tmp_path, capsys):
    summarize([0.0, 0.5, 1.0, 1.0], {"eval/accuracy": 0.1}, {"eval/accuracy": 0.9}, tmp_path)
    line = capsys.readouterr().out.strip()
    assert "reward 0.250 -> 1.000 (mean of first/last 2 steps)" in line and "accuracy 0.100 -> 0.900" in line
