"""Rewards for finished episodes, and what happens to the ones that have none.

    scorer = Scorer(resolve_dotted(cfg.task.reward_fn_path), env_runner_or_None)
    rewards, errors, metrics = scorer.score(samples)   # errors[i]: why samples[i] has no reward
    ...
    trained = trainable(samples)                        # before the Batch is built; samples stay as scored

A reward function that raises, or returns NaN, inf or a non-number, gives a reward error: the
sample keeps reward 0 while it is counted (reward/errors) and shown (the first few in full), then
neutralize_reward_errors takes it out of training: its loss mask becomes all zeros (no gradient)
and its reward the mean of the valid rewards of its group, so the group's baseline is that of the
episodes that did score. A NaN therefore never reaches the advantages or the weights.
"""

from __future__ import annotations

import statistics
import traceback
from collections.abc import Callable
from dataclasses import replace

from relay.envs.base import EnvRunner
from relay.envs.trajectory import reward_caller, reward_value
from relay.failures import print_failure
from relay.fault_points import hit
from relay.types import Sample


class Scorer:
    def __init__(self, reward_fn: Callable, envs: EnvRunner | None = None):
        self.call = reward_caller(reward_fn)
        self.name = getattr(reward_fn, "__qualname__", repr(reward_fn))
        self.envs = envs
        self.errors = 0

    def score(self, samples: list[Sample]) -> tuple[list[float], list[str | None], dict[str, float]]:
        """One reward per sample (0.0 where it failed), why it failed (None where it did not), metrics."""
        hit("reward.function")
        rewards, errors = [], []
        for s in samples:
            env, reuse = self.envs.finished(s.meta.get("episode_id", "")) if self.envs else (None, False)
            try:
                value, why = reward_value(self.call(s, env))
            except Exception as e:
                value = 0.0
                why = f"raised {type(e).__name__}: {e}\n" + "".join(traceback.format_tb(e.__traceback__, limit=-3))
            finally:
                if self.envs:
                    self.envs.recycle(env, reuse)
            if why is not None:
                why = f"reward function {self.name}: {why}"
                self._report(why, s)
            rewards.append(value)
            errors.append(why)
        return rewards, errors, {"reward/errors": float(sum(e is not None for e in errors))}

    def _report(self, why: str, sample: Sample) -> None:
        self.errors += 1
        where = f"episode {sample.meta.get('episode_id', '?')} (group {sample.group_id})"
        print_failure(
            self.errors,
            f"reward error on {where}: {why.rstrip()}",
            f"{self.errors} reward errors so far; the latest, on {where}: {why.splitlines()[0]}",
        )


def neutralize_reward_errors(samples: list[Sample]) -> int:
    """Samples with a reward error: no gradient, and their group's mean valid reward. Returns how many."""
    valid: dict[int, list[float]] = {}
    for s in samples:
        if s.reward_error is None:
            valid.setdefault(s.group_id, []).append(s.reward)
    failed = [s for s in samples if s.reward_error is not None]
    for s in failed:
        s.reward = statistics.fmean(valid[s.group_id]) if s.group_id in valid else 0.0
        s.loss_mask = [0] * len(s.loss_mask)
        s.token_rewards = {}
    return len(failed)


def trainable(samples: list[Sample]) -> list[Sample]:
    """The samples to train on: each one with a reward error as a neutralized copy
    (neutralize_reward_errors), the others as they are. `samples` stay as scored, for the logs."""
    trained = [replace(s) if s.reward_error is not None else s for s in samples]
    neutralize_reward_errors(trained)
    return trained
