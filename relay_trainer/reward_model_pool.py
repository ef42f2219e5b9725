"""The driver's side of the RewardModel actors (actors/reward_model.py).

The driver calls `score_with_reward_model(actors, samples)` right after the rule rewards are on
the samples: it shards the samples over the RewardModel actors, normalises the scores (when
reward_model.normalize), and writes each sample's combined reward:
`rule_weight * rule reward + weight * rm_score`, or, when the task's reward function takes
`rm_score`, that function's value. A sample the reward model could not score (a malformed judge
verdict) gets a reward error: counted, shown, never trained on (relay/envs/scoring.py).
"""

from __future__ import annotations

import time

from actors.supervision import Call, Supervisor
from relay.config import resolve_dotted
from relay.config.role_settings import RewardPoolSettings
from relay.envs.scoring import Scorer
from relay.failures import print_failure
from relay.rewards.reward_model import RunningMeanStd, combine, score_metrics
from relay.types import Sample


class RewardModelPool:
    """The driver's handle on the RewardModel actors: the running score statistics live here, so
    every actor's scores are normalised alike. The actors hold no state but their model, so one
    that dies is rebuilt by Ray (resources.max_restarts) and its shard is scored again there
    (`faults`, the driver's Supervisor; counted in faults/*)."""

    def __init__(self, settings: RewardPoolSettings, handles: list, faults: Supervisor | None = None):
        self.cfg, self.handles = settings.reward_model, handles
        # scoring's deadline is resources.update_timeout_s: a hung reward model is killed, restarted
        # and its shard scored again, like one that died
        self.faults = faults or Supervisor(settings.call_timeout_s, update_timeout_s=settings.update_timeout_s)
        self.norm = RunningMeanStd() if self.cfg.normalize else None
        # the task's reward function combines rm_score itself: called here, after the reward model
        self.combiner = Scorer(resolve_dotted(settings.reward_fn_path)) if settings.takes_rm_score else None
        self.failures = 0

    def score(self, samples: list[Sample]) -> dict[str, float]:
        """Score `samples` on the actors, write each one's combined reward; the rm/* metrics."""
        start, k = time.perf_counter(), len(self.handles)
        shards = [samples[i::k] for i in range(k)]
        calls = [
            Call(h, lambda h=h, shard=shard: h.score.remote(shard), f"reward_model-{i} scores")
            for i, (h, shard) in enumerate(zip(self.handles, shards))
            if shard
        ]
        results = self.faults.get_all(calls, self.faults.update_timeout_s)
        scores: list[float | None] = [None] * len(samples)
        errors: list[str | None] = [None] * len(samples)
        for i, (shard_scores, shard_errors) in enumerate(results):
            scores[i::k], errors[i::k] = shard_scores, shard_errors
        return {**self.apply(samples, scores, errors), "rm/seconds": time.perf_counter() - start}

    def apply(self, samples: list[Sample], scores: list[float | None], errors: list[str | None]) -> dict[str, float]:
        """Normalise the scores, write each sample's combined reward (or reward error); the metrics."""
        valid = [j for j, s in enumerate(scores) if s is not None]
        used = list(scores)
        if self.norm is not None and valid:
            for j, value in zip(valid, self.norm.normalize([scores[j] for j in valid])):
                used[j] = value
        for s, score, error in zip(samples, used, errors):
            s.meta["rule_reward"], s.meta["rm_score"] = s.reward, score
            if error is not None:
                self._fail(s, f"reward model: {error}")
            elif self.combiner is None and s.reward_error is None:
                s.reward = combine(s.reward, score, self.cfg.rule_weight, self.cfg.weight)
        if self.combiner is not None:
            scored = [s for s in samples if s.meta["rm_score"] is not None]
            rewards, reward_errors, _ = self.combiner.score(scored)
            for s, reward, error in zip(scored, rewards, reward_errors):
                s.reward, s.reward_error = reward, error
        return {
            **score_metrics(scores, sum(e is not None for e in errors)),
            "reward/errors": float(sum(s.reward_error is not None for s in samples)),  # the rule's and the RM's
            # the rule's mean on the same samples: a score that rises while this does not is reward hacking
            "rm/rule_reward_mean": sum(s.meta["rule_reward"] for s in samples) / len(samples),
        }

    def state_dict(self) -> dict:
        """What a checkpoint keeps: the running score statistics (reward_model.normalize)."""
        return {} if self.norm is None else {"norm": self.norm.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if self.norm is not None and "norm" in state:
            self.norm.load_state_dict(state["norm"])

    def _fail(self, sample: Sample, why: str) -> None:
        sample.reward, sample.reward_error = 0.0, why
        self.failures += 1
        where = f"episode {sample.meta.get('episode_id', '?')} (group {sample.group_id})"
        print_failure(
            self.failures,
            f"reward error on {where}: {why}",
            f"{self.failures} reward-model errors so far; the latest, on {where}: {why.splitlines()[0]}",
        )


def score_with_reward_model(actors, samples: list[Sample]) -> dict[str, float]:
    """The reward model's scores combined into the samples' rewards (nothing without reward_model.path)."""
    pool: RewardModelPool | None = getattr(actors, "reward_model", None)
    return pool.score(samples) if pool is not None and samples else {}
