"""EnvPool: environments (user code) and reward functions. Their failures become data, not crashes.

Rollout workers call reset / step / close by handle for the episodes they run (relay.envs.base.
EnvRunner holds the instances, one per episode in flight, reused); the driver calls score on the
pool that ran the episodes, so a reward function receives the episode's own environment.
"""

from __future__ import annotations

from actors.plumbing import RelayActor
from relay.config import TaskConfig, resolve_dotted
from relay.envs.base import EnvRunner, ResetResult, StepResult
from relay.envs.contract import EnvMaker
from relay.envs.scoring import Scorer
from relay.types import Sample


class EnvPool(RelayActor):
    # actors/plumbing.py. Calls are environment resets and steps plus samples scored; errors are those that failed.
    repr_format = "env-{index}, {calls} calls, {errors} errors"
    index, calls, errors = 0, 0, 0

    def __init__(self, task: TaskConfig, index: int = 0):
        self.index = index
        self.envs = EnvRunner(EnvMaker(resolve_dotted(task.env), task.env_config)) if task.env else None
        self.scorer = Scorer(resolve_dotted(task.reward_fn_path), self.envs)

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

    def score(self, samples: list[Sample]) -> tuple[list[float], list[str | None], dict[str, float]]:
        """One reward per sample and why it has none (None: it has one); relay/envs/scoring.py."""
        rewards, errors, metrics = self.scorer.score(samples)
        self.calls, self.errors = self.calls + len(samples), self.errors + sum(e is not None for e in errors)
        return rewards, errors, metrics
