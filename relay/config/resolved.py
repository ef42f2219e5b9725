"""Settings whose null means "decided by other settings", resolved where the code reads them."""

from __future__ import annotations

from relay.config.schema import Config

# What a null algorithm.tis_cap means where samples come from older weights: measured on the default
# task (8 seeds, docs/benchmarks/async_parity.md), async without it ends 5 points below sync; with 2.0, within noise.
STALE_SAMPLES_TIS_CAP = 2.0


def tis_cap(cfg: Config) -> float | None:
    """The truncated-IS cap the learner uses: algorithm.tis_cap, its null resolved by training.mode."""
    cap = cfg.algorithm.tis_cap
    if cap is None:
        return None if cfg.training.mode == "sync" else STALE_SAMPLES_TIS_CAP
    return cap or None  # 0: off
