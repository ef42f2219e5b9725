"""An agent program trained through the endpoint (configs/agent.yaml): relay/endpoint/example_agent.py,
written against the `openai` client only, asks the built-in arithmetic questions; its reward rises."""

import json
from pathlib import Path

from relay.config import load_config
from relay_trainer import loop

REPO = Path(__file__).resolve().parents[2]


def test_an_agent_program_learns_through_the_endpoint(tmp_path, ray_session):
    overrides = [f"run.output_dir={tmp_path}", "logging.console=false", "checkpoint.save_hf_model=false"]
    # 10 steps: +0.40 and +0.30 on two seeds (run.seed 0 and 1), twice the rise asserted
    overrides += ["training.steps=10", "task.num_eval_rows=128"]
    summary = loop.train(load_config(REPO / "configs/agent.yaml", overrides))
    print(summary)
    # held-out: the agent program's own reward, greedy, on 128 held-out questions
    assert summary["accuracy_after"] >= summary["accuracy_before"] + 0.15
    steps = [json.loads(line) for line in (Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    first = steps[0]
    assert first["rollout/logprob_diff_max"] < 1e-3  # the learner scores exactly the tokens the endpoint served
    assert first["agent/calls_mean"] == 1.0 and first["agent/history_splits"] == 0
    assert first["agent/program_errors"] == 0 and first["reward/errors"] == 0
