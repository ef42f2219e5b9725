"""A reward function slow enough that rollout is most of a step (tests/e2e/test_elastic_pool.py): an
elastic pool then asks for another worker, as it would for a slow environment or a long generation."""

import time

from relay.envs.arithmetic import arithmetic_reward

SECONDS_PER_SAMPLE = 0.1


def slow_arithmetic(sample) -> float:
    time.sleep(SECONDS_PER_SAMPLE)  # scored in the rollout worker: inside the rollout phase
    return arithmetic_reward(sample)
