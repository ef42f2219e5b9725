"""The real tool server the hostile-code tests attack (tests/sandbox/test_hostile*.py): started once
for them (`python -m relay.tools.server --port 0` on 127.0.0.1, a secret in its environment, small
limits so the tests stay well under 90 s on 2 cores; `serving` starts another under other limits for a
test that needs them), and the checks that nothing outlives a run."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

from relay.tools.sandbox import SANDBOX_UID, sandbox_available

REPO = Path(__file__).resolve().parents[2]
OK, WHY = sandbox_available()

SECRET_NAME = "RELAY_TEST_SECRET"
SECRET = "s3cr3t-" + secrets.token_hex(8)
# A hostile run is stopped at these limits, and a dozen runs here wait them out (a loop, a sleep, a
# fork bomb): seconds each. A normal run here takes well under 0.5 s, output floods and full disks too.
LIMITS = dict(
    wall_timeout_s=2, cpu_seconds=1, memory_mb=128, max_pids=16, tmpfs_mb=8, file_size_mb=4, max_output_bytes=64 * 1024
)
SLOTS = 4


def _post(url: str, payload: dict, timeout: float = 60) -> dict:
    import urllib.request

    req = urllib.request.Request(
        url + "/execute", data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        assert resp.status == 200
        return json.loads(resp.read())


def _health(url: str) -> dict:
    import urllib.request

    with urllib.request.urlopen(url + "/health", timeout=10) as resp:
        return json.loads(resp.read())


def _nobody_pids() -> set[int]:
    """Live processes running as the sandbox's host uid.

    Zombies are left out: they are dead (no memory, no CPU, cannot act). An orphan of a killed
    sandbox is reaped by the host's pid 1, which may take a moment.
    """
    out = set()
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/status") as f:
                    fields = dict(line.split(":", 1) for line in f if ":" in line)
            except OSError:
                continue
            if int(fields["Uid"].split()[1]) == SANDBOX_UID and not fields["State"].strip().startswith("Z"):
                out.add(int(p))
    return out


def _pids_with(marker: str) -> list[int]:
    found = []
    for p in os.listdir("/proc"):
        if p.isdigit() and int(p) != os.getpid():
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(p))
            except OSError:
                pass
    return found


def _run_cgroups(server_pid: int) -> list[str]:
    """Run cgroups of the server still on disk (in every hierarchy)."""
    left = []
    for root, dirs, _ in os.walk("/sys/fs/cgroup"):
        left += [os.path.join(root, d) for d in dirs if d.startswith(f"relay-sbx-{server_pid}-")]
        dirs[:] = [d for d in dirs if not d.startswith("relay-sbx")]
    return left


def _wait_until(predicate, limit_s: float = 5.0) -> bool:
    end = time.monotonic() + limit_s
    while not predicate():
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


@contextlib.contextmanager
def serving(limits: dict):
    """The tool server under `limits`, stopped and checked for leftover run cgroups on exit."""
    env = dict(os.environ, **{SECRET_NAME: SECRET})
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    args = [sys.executable, "-m", "relay.tools.server", "--host", "127.0.0.1", "--port", "0"]
    args += ["--max-concurrency", str(SLOTS), "--log-level", "WARNING"]
    for k, v in limits.items():
        args += ["--" + k.replace("_", "-"), str(v)]
    before = _nobody_pids()
    proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        assert m, f"server did not start: {line!r}"
        yield {"url": m.group(1), "pid": proc.pid, "nobody_before": before}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    assert _run_cgroups(proc.pid) == []


@pytest.fixture(scope="package")
def server():
    with serving(LIMITS) as s:
        yield s


@pytest.fixture
def nothing_survives(server):
    yield
    # Every sandbox process runs as host uid 65534; none may outlive its run, and every run
    # cgroup is removed before the server answers.
    assert _wait_until(lambda: not (_nobody_pids() - server["nobody_before"])), (
        f"sandbox processes survived: {_nobody_pids() - server['nobody_before']}"
    )
    assert _wait_until(lambda: not _run_cgroups(server["pid"])), _run_cgroups(server["pid"])
    h = _health(server["url"])
    assert h["ok"] and h["running"] == 0 and h["waiting"] == 0


def run(server, code: str, **extra) -> dict:
    return _post(server["url"], {"code": code, **extra})
