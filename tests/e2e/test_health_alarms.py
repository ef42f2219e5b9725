"""The health monitor on `python driver.py`'s entry point (driver.main, in this process, on the
tests' shared local Ray): an lr that collapses the default task's policy (reward 0.83 -> 0 at
step 2, every response at the token cap) prints `relay: health:` lines at step 2, logs them, and
with health.stop_on stops after a checkpoint with the resume command and exit status 1.
tests/e2e/test_stop.py stops real driver processes."""

from __future__ import annotations

import json
import shlex

import driver


def test_a_collapsing_lr_raises_alarms_and_stop_on_stops_after_a_checkpoint(tmp_path, ray_session, capsys):
    argv = [
        "training.lr=3e-2",
        "training.steps=6",
        "health.stop_on=[reward_collapse]",
        f"run.output_dir={tmp_path}",
        "run.name=collapse",
        "checkpoint.save_hf_model=false",
    ]
    status = driver.main(argv)
    captured = capsys.readouterr()
    out = captured.out + captured.err
    assert status == 1, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    alarms = [line for line in out.splitlines() if line.startswith("relay: health: step ")]
    assert {line.split(":")[3].strip() for line in alarms} >= {"reward_collapse", "entropy_collapse"}, out[-3000:]
    assert all(line.startswith("relay: health: step 2: ") for line in alarms), alarms
    collapse = next(line for line in alarms if ": reward_collapse: " in line)
    assert "reward/mean 0, down 100% from its mean 0.828" in collapse and collapse.endswith("(health.stop_on)")

    run_dir = tmp_path / "collapse"
    checkpoint = run_dir / "checkpoints" / "step_00000002"
    stopped = [line for line in out.splitlines() if line.startswith("relay: health: stopped after step 2: ")]
    assert len(stopped) == 1, out[-3000:]
    assert f"latest checkpoint {checkpoint};" in stopped[0] and checkpoint.is_dir()
    assert shlex.split(stopped[0].split("; resume: ", 1)[1])[:3] == ["python", "driver.py", "--resume"]

    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]  # stopped after the step it fired at
    assert records[0]["health/alarms"] == 0 and records[1]["health/alarms"] >= 2
    assert records[1]["health/fired/reward_collapse"] == 1 and records[1]["health/reward_collapse"] == 1
