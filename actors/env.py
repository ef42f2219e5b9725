"""EnvPool: user reward functions (and environments). Their failures become data, not crashes."""
from __future__ import annotations

import traceback

from relay.config import Config, resolve_dotted
from relay.types import Sample


class EnvPool:
    def __init__(self, cfg: Config):
        self.reward_fn = resolve_dotted(cfg.task.reward_fn)

    def score(self, samples: list[Sample]) -> tuple[list[float], dict[str, float]]:
        """One float per sample. A reward function that raises gives 0 and is counted."""
        rewards, errors, last_error = [], 0, ""
        for s in samples:
            try:
                rewards.append(float(self.reward_fn(s, None)))
            except Exception:
                rewards.append(0.0)
                errors += 1
                last_error = traceback.format_exc(limit=3)
        if errors:
            print(f"EnvPool: reward function failed on {errors}/{len(samples)} samples; last error:\n{last_error}")
        return rewards, {"reward/errors": float(errors)}
