"""EnvPool: environments (user code) and reward functions. Their failures become data, not crashes.

Rollout workers call reset / step / close by handle for the episodes they run (relay.envs.base.
EnvRunner holds the instances, one per episode in flight, reused); the driver calls score on the
pool that ran the episodes, so a reward function receives the episode's own environment.
"""

from __future__ import annotations

from relay.config import Config, resolve_dotted
from relay.envs.base import EnvRunner, ResetResult, StepResult
from relay.envs.contract import EnvMaker
from relay.envs.scoring import Scorer
from relay.types import Sample


class EnvPool:
    def __init__(self, cfg: Config):
        t = cfg.task
        self.envs = EnvRunner(EnvMaker(resolve_dotted(t.env), t.env_config)) if t.env else None
        self.scorer = Scorer(resolve_dotted(t.reward_fn_path), self.envs)

    def reset(self, episode_ids: list[str], rows: list[dict]) -> list[ResetResult]:
        return self.envs.reset(episode_ids, rows)

    def step(self, episode_ids: list[str], actions: list[str]) -> list[StepResult]:
        return self.envs.step(episode_ids, actions)

    def close(self, episode_ids: list[str]) -> None:
        self.envs.close(episode_ids)

    def score(self, samples: list[Sample]) -> tuple[list[float], list[str | None], dict[str, float]]:
        """One reward per sample and why it has none (None: it has one); relay/envs/scoring.py."""
        return self.scorer.score(samples)
