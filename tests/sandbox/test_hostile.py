"""Hostile code sent through the real tool server: each attack is contained, reported as data,
and leaves nothing behind. Processes and memory here; network, files, output and concurrency in
tests/sandbox/test_hostile_io.py. The server: tests/hostile_server.py."""

from __future__ import annotations

import secrets

import pytest

from tests.hostile_server import LIMITS, OK, WHY, _pids_with, _wait_until, run, serving

pytestmark = [
    pytest.mark.skipif(not OK, reason=f"sandbox unavailable here: {WHY}"),
    pytest.mark.usefixtures("nothing_survives"),
]


def test_normal_code_runs(server):
    r = run(server, "import sys\nprint('héllo 世界', sum(range(10)))\nprint('warn', file=sys.stderr)")
    assert r["ok"] and r["exit_code"] == 0 and r["error"] is None
    assert r["stdout"] == "héllo 世界 45\n" and r["stderr"] == "warn\n"


def test_infinite_loop_hits_cpu_limit(server):
    r = run(server, "while True:\n    pass")
    assert not r["ok"]
    assert r["killed_reason"] in ("cpu", "wall_timeout")


def test_sleep_forever_hits_wall_clock(server):
    r = run(server, "import time\nprint('sleeping', flush=True)\ntime.sleep(10**6)")
    assert r["timed_out"] and r["killed_reason"] == "wall_timeout" and not r["ok"]
    assert r["stdout"] == "sleeping\n"  # output before the kill is kept


def test_fork_bomb_is_capped_and_swept(server):
    code = "import os\nn = 0\nwhile True:\n    try:\n        os.fork(); n += 1\n    except OSError:\n        pass"
    r = run(server, code)
    assert r["timed_out"] and not r["ok"]


@pytest.mark.parametrize("main_waits", [False, True], ids=["main-exits", "main-sleeps"])
def test_setsid_double_fork_escapee_dies(server, main_waits):
    marker = "relay-escapee-" + secrets.token_hex(6)
    code = f"""
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(10**6)", "{marker}"])
    os._exit(0)
# wait until the escapee runs (it shows in our /proc with the marker), then report it
for _ in range(200):
    found = [p for p in os.listdir("/proc") if p.isdigit() and b"{marker}" in open(f"/proc/{{p}}/cmdline", "rb").read()]
    if found:
        print("ESCAPEE_RUNNING", flush=True)
        break
    time.sleep(0.01)
{"time.sleep(10**6)" if main_waits else ""}
"""
    r = run(server, code)
    assert "ESCAPEE_RUNNING" in r["stdout"], r
    assert r["timed_out"] == main_waits
    # The PID namespace took it down: no process with the marker is left on the host.
    assert _wait_until(lambda: not _pids_with(marker)), _pids_with(marker)


def test_memory_bomb_one_process(server):
    r = run(server, "x = bytearray(10**9)\nprint('allocated')")
    assert not r["ok"] and "allocated" not in r["stdout"]
    assert "MemoryError" in r["stderr"] or r["killed_reason"] == "memory"


def test_memory_bomb_many_processes_hits_cgroup():
    # Each child stays under RLIMIT_AS; together they pass the cgroup's limit. Its own server, with
    # a wall clock long enough that a loaded machine still reaches the memory kill before it.
    code = """
import os, time
for i in range(6):
    if os.fork() == 0:
        b = bytearray(100 * 2**20)
        for j in range(0, len(b), 4096):
            b[j] = 1
        time.sleep(1)
        os._exit(0)
for i in range(6):
    try:
        os.wait()
    except ChildProcessError:
        break
print("parent done")
"""
    with serving(LIMITS | {"wall_timeout_s": 30}) as roomy:
        r = run(roomy, code)
    assert r["killed_reason"] == "memory" and not r["ok"], r
