"""Stopping a real `python driver.py` the way users do, then going on from what it left.

Ctrl-C in a terminal sends SIGINT to the whole foreground process group (Ray's own processes
block it), so the test sends it to the driver's group. `ray job stop` sends SIGTERM to the job's
driver (and its children: none, since a job's driver joins a running cluster), and so does
`kill PID`, so the test sends it to the driver alone: sent to the group it would also end the
local Ray this driver started, under the step in progress. Each run
starts its own local Ray under a short temp folder of its own (RAY_TMPDIR), never /tmp/ray, and
teardown kills whatever still names that folder.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.e2e.test_ray_job import processes_naming
from tests.prometheus import export_port

REPO = Path(__file__).resolve().parents[2]
ARGS = [
    "training.steps=500",  # never reached: the test stops it
    "training.prompts_per_step=4",
    "rollout.n=4",
    "task.num_eval_rows=4",
    "checkpoint.every=1000",  # no checkpoint falls due: the one on stop is checkpoint.on_stop's
    "checkpoint.save_hf_model=false",
    "logging.console=false",
]


def steps_logged(run_dir: Path) -> list[int]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line)["step"] for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def listening_addresses(port: int) -> set[str]:
    """The local addresses with a listening TCP socket on `port` (/proc/net/tcp and tcp6, hex)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.rsplit(":", 1)
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.add(address)
    return found


def stop_after(
    argv: list[str], run_dir: Path, steps: int, signum: int, env: dict, group: bool, check=None
) -> tuple[int, str]:
    """Start `python driver.py argv`, send `signum` to it (`group`: to its process group) once
    `steps` steps are logged, after calling `check()` if given; returns its exit status and
    everything it printed."""
    proc = subprocess.Popen(
        [sys.executable, "driver.py", *argv],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 400  # start-up on a loaded 2-core machine: up to ~2 minutes
        while len(steps_logged(run_dir)) < steps and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert proc.poll() is None, f"the driver ended before it was stopped:\n{proc.communicate()[0][-3000:]}"
        if check is not None:
            check()
        (os.killpg if group else os.kill)(proc.pid, signum)
        out, _ = proc.communicate(timeout=180)
        return proc.returncode, out
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_sigint_stops_cleanly_and_the_resumed_run_stops_on_sigterm(tmp_path):
    ray_tmp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: unix socket paths
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_TMPDIR=ray_tmp, RAY_USAGE_STATS_ENABLED="0", PYTHONUNBUFFERED="1")
    run_dir = tmp_path / "stop"

    def metrics_export_on_loopback_only():  # the Ray the driver started (relay_trainer/pools.py, loopback_node)
        port = export_port(str(Path(ray_tmp) / "ray" / "session_latest"))
        assert port is not None
        # 0100007F: 127.0.0.1 as /proc/net/tcp writes it; tcp6 would show it v4-mapped
        assert listening_addresses(port) <= {"0100007F", "0000000000000000FFFF00000100007F"}, port
        assert listening_addresses(port), port

    try:
        status, out = stop_after(
            [*ARGS, f"run.output_dir={tmp_path}", "run.name=stop"],
            run_dir,
            1,
            signal.SIGINT,
            env,
            group=True,
            check=metrics_export_on_loopback_only,
        )
        assert status == 130, out[-3000:]
        assert "Traceback" not in out, out[-3000:]
        stopped = [line for line in out.splitlines() if line.startswith("relay: stopped by SIGINT after step ")]
        assert len(stopped) == 1, out[-3000:]
        last = steps_logged(run_dir)[-1]
        checkpoint = run_dir / "checkpoints" / f"step_{last:08d}"
        assert stopped[0].startswith(f"relay: stopped by SIGINT after step {last}; latest checkpoint {checkpoint};")
        assert checkpoint.is_dir()

        # The printed command, as printed, goes on from that checkpoint; SIGTERM stops it the same way.
        command = shlex.split(stopped[0].split("; resume: ", 1)[1])
        assert command[:3] == ["python", "driver.py", "--resume"]
        status, out = stop_after(command[2:], run_dir, last + 1, signal.SIGTERM, env, group=False)
        assert status == 143, out[-3000:]
        assert "Traceback" not in out, out[-3000:]
        assert f"resumed from {checkpoint} at step {last}" in out
        assert len([line for line in out.splitlines() if line.startswith("relay: stopped by SIGTERM after step ")]) == 1
        steps = steps_logged(run_dir)
        assert steps == list(range(1, len(steps) + 1)) and len(steps) > last  # no step twice, none lost
    finally:
        for pid in processes_naming(ray_tmp):  # anything of the local Rays the drivers left
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(ray_tmp, ignore_errors=True)
