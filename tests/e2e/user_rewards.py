"""Reward functions that fail on purpose, loaded by dotted path in the actors (tests/e2e/test_user_env.py)."""

from relay.envs.arithmetic import arithmetic_reward


def nan_when_wrong(sample, env):
    return arithmetic_reward(sample) or float("nan")


def always_nan(trajectory):
    return float("nan")
