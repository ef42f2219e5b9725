"""The supervised stage (sft.*) in a real run: demonstrations from a file are trained on by the
learner before RL, logged apart from RL's steps, and the held-out accuracy after it is reported;
a malformed file stops the run before anything starts, naming its file and line."""

import json
import math

import driver
from relay.envs.arithmetic import make_rows

SMALL = [
    "training.steps=2",
    "training.prompts_per_step=2",
    "rollout.n=2",
    "task.num_eval_rows=8",
    "logging.console=false",
    "checkpoint.save_hf_model=false",
]


def write_demonstrations(path, rows):
    with open(path, "w") as f:
        for row in rows:
            messages = [
                {"role": "user", "content": row["prompt"]},
                {"role": "assistant", "content": row["ground_truth"]},
            ]
            f.write(json.dumps({"messages": messages}) + "\n")


def test_sft_then_rl_reports_three_held_out_numbers(tmp_path, capsys, ray_session):
    demos = tmp_path / "sums.jsonl"
    write_demonstrations(demos, make_rows(24, seed=5, digits=2))
    args = [f"run.output_dir={tmp_path}", "run.name=sft", "sft.steps=3", "sft.batch_size=8", f"sft.data={demos}"]
    assert driver.main([*args, *SMALL]) == 0
    run = tmp_path / "sft"
    sft_rows = [json.loads(line) for line in (run / "sft_metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in sft_rows] == [1, 2, 3]
    assert all(math.isfinite(r["sft/nll"]) and r["sft/tokens"] > 0 and r["sft/optimizer_steps"] == 1 for r in sft_rows)
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    summary = json.loads((run / "summary.json").read_text())
    assert {"accuracy_before", "accuracy_after_sft", "accuracy_after"} <= set(summary)
    out = capsys.readouterr().out
    assert (
        f"held-out accuracy {summary['accuracy_before']:.3f} -> {summary['accuracy_after_sft']:.3f} (after SFT) -> "
        in out
    )


def test_a_bad_demonstration_line_stops_before_any_actor(tmp_path, capsys, ray_session):
    demos = tmp_path / "bad.jsonl"
    write_demonstrations(demos, make_rows(2, seed=5, digits=2))
    with open(demos, "a") as f:
        f.write('{"messages": [{"role": "user", "content": "1+1"}]}\n')
    out = tmp_path / "runs"
    assert driver.main([f"run.output_dir={out}", "sft.steps=2", f"sft.data={demos}", *SMALL]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"relay: error: sft.data: {demos}:3: no assistant message: nothing to learn from"], err
    assert not out.exists()


def test_the_supervised_stage_alone_is_a_run_whose_held_out_result_is_after_sft(tmp_path, ray_session):
    """training.steps=0 with sft.steps: no RL step; the summary says when each result was in."""
    demos = tmp_path / "sums.jsonl"
    write_demonstrations(demos, make_rows(24, seed=5, digits=2))
    args = [f"run.output_dir={tmp_path}", "run.name=sft-only", "sft.steps=2", "sft.batch_size=8", f"sft.data={demos}"]
    assert driver.main([*args, *SMALL, "training.steps=0"]) == 0
    summary = json.loads((tmp_path / "sft-only" / "summary.json").read_text())
    assert summary["accuracy_after"] == summary["accuracy_after_sft"] and math.isnan(summary["reward_start"])
    assert 0 < summary["seconds_before"] < summary["seconds_after_sft"] <= summary["seconds_after"]
