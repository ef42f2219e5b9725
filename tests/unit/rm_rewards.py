"""A reward function that combines the reward model's score itself (tests/unit/test_reward_model.py)."""

from relay.envs.arithmetic import arithmetic_reward


def rule_plus_half_rm(sample, rm_score=None):
    """The rule, plus half the RM's score where there is one (None: held-out evaluation, the rule pass)."""
    return arithmetic_reward(sample) + (0.0 if rm_score is None else 0.5 * rm_score)
