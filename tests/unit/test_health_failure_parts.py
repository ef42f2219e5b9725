"""benchmarks/health_failure_parts.py and benchmarks/health_failures.py's reading of a run: the
loophole reward pays the carry slip on training rows and only the exact sum on held-out rows; the
calculator tool fails every call after its working ones; a fall is counted from the best earlier point."""

import pytest

import benchmarks.health_failure_parts as parts
from benchmarks.health_failures import first_fall
from relay.envs.trajectory import Trajectory
from relay.types import Sample


def episode(prompt: str, text: str, ground_truth=None) -> Trajectory:
    sample = Sample(prompt_ids=[0], ground_truth=ground_truth, final_text=text, response_text=text,
                    meta={"messages": [{"role": "user", "content": prompt}]})  # fmt: skip
    return Trajectory.from_sample(sample)


def test_loophole_pays_the_slip_in_training_and_only_the_sum_held_out():
    assert parts.slip_sum("17+25") == 32 and parts.slip_sum("13+21") == 34
    assert parts.carry_slip_reward(episode("17+25", "32")) == 1.0
    assert parts.carry_slip_reward(episode("17+25", "42")) == 0.0
    assert parts.carry_slip_reward(episode("13+21", "34")) == 1.0
    assert parts.carry_slip_reward(episode("17+25", "42", "42")) == 1.0
    assert parts.carry_slip_reward(episode("17+25", "32", "42")) == 0.0


def test_the_tool_answers_then_fails(monkeypatch):
    monkeypatch.setattr(parts, "WORKING_CALLS", next(parts._calls) + 2)
    assert parts.python("print(37*48)") == "1776"
    with pytest.raises(ValueError):
        parts.python("print(2**3)")
    with pytest.raises(ConnectionError):
        parts.python("print(2*3)")


def test_a_fall_is_measured_from_the_best_earlier_point():
    assert first_fall([(0, 0.5), (2, 0.6), (4, 0.59), (6, 0.55)], 0.02) == 6
    assert first_fall([(0, 0.5), (2, 0.6), (4, 0.7)], 0.02) is None
