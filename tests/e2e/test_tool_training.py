"""End to end: loop.train on the tool-using math task, tool calls through the real sandbox.

A short CPU run of configs/math_tool.yaml (from the warm-started tiny model shipped in the
repository). Checks that the run finished, that tool calls happened in the sandbox,
that rewards were computed from them, and that the policy learned to call the tool more.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from relay.config import load_config
from relay.tools.sandbox import SandboxConfig, sandbox_available
from relay_trainer import loop, steps

pytestmark = [
    pytest.mark.slow,
    pytest.mark.usefixtures("ray_session"),
    pytest.mark.skipif(not sandbox_available(SandboxConfig())[0], reason="the code sandbox cannot be built here"),
]

REPO = Path(__file__).resolve().parents[2]
STEPS = 12


def test_math_tool_trains_with_sandboxed_tool_calls(tmp_path, monkeypatch):
    cfg = load_config(
        REPO / "configs/math_tool.yaml",
        [
            f"run.output_dir={tmp_path}",
            f"training.steps={STEPS}",
            "task.num_eval_rows=32",
            "checkpoint.save_hf_model=false",
        ],
    )
    batches = []  # every training batch's samples, as the driver scored them (reward set in place)
    original = steps.rollout

    def recording_rollout(actors, rows, *args, **kwargs):
        samples, metrics = original(actors, rows, *args, **kwargs)
        if not kwargs.get("greedy"):
            batches.append(samples)
        return samples, metrics

    monkeypatch.setattr(steps, "rollout", recording_rollout)
    reported = []
    summary = loop.train(cfg, report=lambda step, metrics: reported.append(metrics))

    # the run finished: every step reported, the last checkpoint written, metrics logged
    assert len(reported) == STEPS and len(batches) == STEPS
    run_dir = tmp_path / cfg.run.name
    assert any((run_dir / "checkpoints").iterdir())
    logged = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert logged and all("reward/mean" in m for m in logged)

    # tool calls happened, in the real sandbox, and the model read their output
    samples = [s for batch in batches for s in batch]
    calls = [c for s in samples for c in s.tool_calls]
    assert len(calls) >= len(samples) // 4, f"{len(calls)} tool calls in {len(samples)} episodes"
    ran = [c for c in calls if c["name"] == "python" and c["ok"]]
    assert ran and all(c["seconds"] > 0 for c in ran)
    assert any("<result>\n" in s.response_text for s in samples)

    # rewards were computed (exact answers after tool calls), and the policy learned from them
    rewards = [s.reward for s in samples]
    assert set(rewards) <= {0.0, 1.0} and sum(rewards) > 0
    assert all(s.reward == sum(s.meta["env"]["rewards"]) for s in samples)
    # RL at work: wrong direct guesses are never rewarded, so the policy calls the tool more often
    # (0.49 -> 0.76 over the first and last 4 of 12 steps at seed 0). Reward and held-out accuracy
    # rise too (0.15 -> 0.22 and 0.34 -> 0.53 on 32 rows at seed 0), but on so few rows and steps one
    # seed is noisy, so they are reported, not asserted.
    per_step = [statistics.fmean(s.reward for s in batch) for batch in batches]
    calls_first = statistics.fmean(len(s.tool_calls) for batch in batches[:4] for s in batch)
    calls_last = statistics.fmean(len(s.tool_calls) for batch in batches[-4:] for s in batch)
    print(
        f"reward {statistics.fmean(per_step[:4]):.3f} -> {statistics.fmean(per_step[-4:]):.3f}; "
        f"tool calls per episode {calls_first:.2f} -> {calls_last:.2f}; "
        f"held-out success {summary['success_rate_before']:.3f} -> {summary['success_rate_after']:.3f}"
    )
    assert calls_last > calls_first
