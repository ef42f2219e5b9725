"""Per-batch summaries of agent episodes: what a rollout worker reports with its samples."""

from __future__ import annotations

import statistics

from relay.run.metric_keys import TOOL_CALLS, TOOL_ERRORS
from relay.types import FinishReason, Sample


def episode_metrics(samples: list[Sample]) -> dict[str, float]:
    """Means per episode (turns, tool calls, tool errors, tool seconds) and finish-reason shares."""
    if not samples:
        return {}
    stats = [s.meta.get("agent", {}) for s in samples]
    out = {
        f"agent/{k}": statistics.fmean(st.get(k, 0) for st in stats)
        for k in ("turns", "tool_calls", "tool_errors", "tool_seconds", "env_steps")
    }
    for reason in FinishReason:
        out[f"agent/finish_{reason}"] = sum(s.finish_reason == reason for s in samples) / len(samples)
    return out


def tool_call_counts(samples: list[Sample]) -> dict[str, float]:
    """Totals over a batch of episodes: the tool calls the model made, and those that failed
    (timeouts, tool errors, and malformed calls, which are counted but never run)."""
    calls = [c for s in samples for c in s.tool_calls]
    return {TOOL_CALLS: float(len(calls)), TOOL_ERRORS: float(sum(not c["ok"] for c in calls))}
