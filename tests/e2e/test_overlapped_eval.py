"""training.eval_every beside training (training.mode=one_step_off) on the tiny model: each
evaluation is logged at a later step with the weights it measured (eval/weights_version, read from
the samples) and eval/lag_steps, and the run completes with its checkpoint."""

import json
from pathlib import Path

from relay.config import load_config
from relay.run import metric_keys as keys
from relay_trainer import loop

REPO = Path(__file__).resolve().parents[2]


def test_one_step_off_evaluations_come_back_with_the_weights_they_measured(tmp_path, ray_session, capsys):
    overrides = [
        f"run.output_dir={tmp_path}",
        "run.name=overlapped-eval",
        "logging.console=false",
        "checkpoint.save_hf_model=false",
        "training.mode=one_step_off",
        "training.eval_every=1",
        "training.eval_before=false",
        "training.prompts_per_step=4",
        "rollout.n=4",
        "task.num_eval_rows=8",
        "training.steps=3",
    ]
    reported = {}
    summary = loop.train(load_config(REPO / "configs/default.yaml", overrides), report=reported.__setitem__)
    assert sorted(reported) == [1, 2, 3] and summary["run_dir"]
    logged = {step: m for step, m in reported.items() if "eval/accuracy" in m}
    # step 1's evaluation is out while step 2 trains, waited for when step 2's starts; step 2's is
    # taken at step 3, which checkpoints; step 3's own would share that record: skipped
    assert sorted(logged) == [2, 3], {s: sorted(k for k in m if k.startswith("eval/")) for s, m in reported.items()}
    for step, m in logged.items():
        assert m[keys.EVAL_LAG_STEPS] == 1.0 and m[keys.EVAL_WEIGHTS_VERSION] == step - 1, (step, m)
        assert 0.0 <= m["eval/accuracy"] <= 1.0
    assert "relay: held-out evaluation of step 3 skipped" in capsys.readouterr().out
    run_dir = tmp_path / "overlapped-eval"
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r[keys.EVAL_WEIGHTS_VERSION] for r in records if keys.EVAL_WEIGHTS_VERSION in r] == [1.0, 2.0]
    assert any((run_dir / "checkpoints").iterdir())
