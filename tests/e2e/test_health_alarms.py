"""The health monitor on a real `python driver.py`: an lr that collapses the default task's policy
(reward 0.83 -> 0 at step 2, every response at the token cap) prints `relay: health:` lines at
step 2, logs them, and with health.stop_on stops after a checkpoint with the resume command.
About 20 s on a quiet 2-core machine."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.e2e.test_ray_job import processes_naming

REPO = Path(__file__).resolve().parents[2]


def test_a_collapsing_lr_raises_alarms_and_stop_on_stops_after_a_checkpoint(tmp_path):
    ray_tmp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # its own local Ray (short: unix socket paths)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_TMPDIR=ray_tmp, RAY_USAGE_STATS_ENABLED="0", PYTHONUNBUFFERED="1")
    argv = [
        "training.lr=3e-2",
        "training.steps=6",
        "health.stop_on=[reward_collapse]",
        f"run.output_dir={tmp_path}",
        "run.name=collapse",
        "checkpoint.save_hf_model=false",
    ]
    try:
        proc = subprocess.run(
            [sys.executable, "driver.py", *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=400
        )
    finally:
        for pid in processes_naming(ray_tmp):  # anything of the local Ray the driver left
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(ray_tmp, ignore_errors=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
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
