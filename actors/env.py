"""EnvPool: environments (user code) and reward functions. Their failures become data, not crashes.

Rollout workers call reset / step / close by handle for the episodes they run (relay.envs.base.
EnvRunner holds the instances, one per episode in flight, reused); the driver calls score.
"""

from __future__ import annotations

import traceback

from relay.config import Config, resolve_dotted
from relay.envs.base import EnvRunner, ResetResult, StepResult
from relay.types import Sample


class EnvPool:
    index, calls, errors = 0, 0, 0  # __repr__'s fields; see RolloutWorker

    def __init__(self, cfg: Config, index: int = 0):
        # What __repr__ reports: plain counters bumped where the work happens. Calls are
        # environment resets and steps plus reward-function calls; errors are those that raised.
        self.index, self.calls, self.errors = index, 0, 0
        self.reward_fn = resolve_dotted(cfg.task.reward_fn)
        self.envs = EnvRunner(resolve_dotted(cfg.task.env)) if cfg.task.env else None

    def __repr__(self) -> str:
        return f"EnvPool(env-{self.index}, {self.calls} calls, {self.errors} errors)"

    def reset(self, episode_ids: list[str], rows: list[dict]) -> list[ResetResult]:
        results = self.envs.reset(episode_ids, rows)
        self.calls += len(results)
        self.errors += sum(r.error is not None for r in results)
        return results

    def step(self, episode_ids: list[str], actions: list[str]) -> list[StepResult]:
        results = self.envs.step(episode_ids, actions)
        self.calls += len(results)
        self.errors += sum(r.error is not None for r in results)
        return results

    def close(self, episode_ids: list[str]) -> None:
        self.envs.close(episode_ids)

    def score(self, samples: list[Sample]) -> tuple[list[float], dict[str, float]]:
        """One float per sample. A reward function that raises gives 0 and is counted.

        Environment tasks name relay.envs.base:episode_return (the sum of the step rewards,
        kept in sample.meta["env"]["rewards"]) or their own function of the sample."""
        rewards, errors, last_error = [], 0, ""
        for s in samples:
            try:
                rewards.append(float(self.reward_fn(s, None)))
            except Exception:
                rewards.append(0.0)
                errors += 1
                last_error = traceback.format_exc(limit=3)
        self.calls, self.errors = self.calls + len(samples), self.errors + errors
        if errors:
            print(f"EnvPool: reward function failed on {errors}/{len(samples)} samples; last error:\n{last_error}")
        return rewards, {"reward/errors": float(errors)}
