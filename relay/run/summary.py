"""A run's summary: its reward at the start and end, each held-out result, when each was in and the
health alarms; written to summary.json and printed (pure: no ray)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

# A constant-answer baseline at least this high is printed beside its accuracy: a Yes/No or
# True/False dataset's accuracy reaches it by one word to every question, which reads as learning
# without it. Lower ones (a number, a word spelled backwards) are in summary.json only.
MAJORITY_SHOWN = 0.2


def summarize(
    rewards: list[float],
    before: dict[str, float],
    after: dict[str, float],
    run_dir: Path,
    after_sft: dict | None = None,
    seconds: dict[str, float] | None = None,
    alarms: list[dict] | None = None,
    baseline: dict[str, float] | None = None,
) -> dict:
    """Reward at the start and end of training, and each held-out metric before and after (and
    after the supervised stage, with sft.steps); printed too. `seconds`: when each held-out
    result was in, counted from the run's start (seconds_before, seconds_after_sft, seconds_after).
    `alarms`: the health monitor's, as health_alarms [{step, rule, value}] (a run with none: []).
    `baseline`: eval/majority and eval/<dataset>/majority (relay.envs.reasoning_gym.majority_metrics),
    as majority and <dataset>/majority, printed beside their accuracy."""
    baseline = baseline or {}
    k = max(1, min(5, len(rewards) // 2))
    mean = lambda values: statistics.fmean(values) if values else float("nan")  # noqa: E731  (no RL steps: none)
    summary = {"reward_start": mean(rewards[:k]), "reward_end": mean(rewards[-k:])}
    held_out = []
    for key, value in after.items():
        name, start = key.removeprefix("eval/"), before.get(key, float("nan"))
        summary[f"{name}_before"], summary[f"{name}_after"] = start, value
        sft = ""
        if after_sft is not None:
            summary[f"{name}_after_sft"] = after_sft.get(key, float("nan"))
            sft = f" -> {summary[f'{name}_after_sft']:.3f} (after SFT)"
        line = f"{name.replace('_', ' ')} {start:.3f}{sft} -> {value:.3f}"
        majority = baseline.get(key.removesuffix("accuracy") + "majority", 0.0)  # eval/accuracy's: eval/majority
        if key.endswith("accuracy") and majority >= MAJORITY_SHOWN:
            line += f" (always the majority answer: {majority:.3f})"
        held_out.append(line)
    summary |= {key.removeprefix("eval/"): value for key, value in baseline.items()}
    summary |= {f"seconds_{when}": round(s, 1) for when, s in (seconds or {}).items()}
    summary["health_alarms"] = [{k: a[k] for k in ("step", "rule", "value")} for a in alarms or ()]
    summary["run_dir"] = str(run_dir)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")  # benchmarks read it
    trained = (
        f"reward {summary['reward_start']:.3f} -> {summary['reward_end']:.3f} (mean of first/last {k} steps)"
        if rewards
        else "no RL steps"
    )
    print(
        f"\nrun {run_dir}: {trained}; held-out {'; '.join(held_out)}"
        + (f"; health alarms: {', '.join(sorted({a['rule'] for a in alarms}))}" if alarms else "")
    )
    return summary
