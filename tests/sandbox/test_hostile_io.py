"""Hostile code sent through the real tool server, part two: no network, no host secrets, no
writes outside temp folders, bounded disk and output, limits a tool call cannot raise, and many
concurrent runs. The server: tests/hostile_server.py."""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.hostile_server import LIMITS, OK, REPO, SECRET, SECRET_NAME, WHY, run

pytestmark = [
    pytest.mark.skipif(not OK, reason=f"sandbox unavailable here: {WHY}"),
    pytest.mark.usefixtures("nothing_survives"),
]


def test_no_network_even_to_host_loopback(server):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    try:
        # The port is reachable from outside the sandbox...
        with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
            conn, _ = listener.accept()
            c.sendall(b"ping")
            assert conn.recv(4) == b"ping"
            conn.close()
        # ...and not from inside it.
        code = f"""
import socket
for addr in [("127.0.0.1", {port}), ("10.0.0.1", 80), ("1.1.1.1", 53)]:
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect(addr)
        print("CONNECTED", addr)
    except OSError as e:
        print("BLOCKED", addr, type(e).__name__)
    finally:
        s.close()
try:
    socket.getaddrinfo("example.com", 80)
    print("DNS_WORKS")
except OSError as e:
    print("DNS_BLOCKED")
"""
        r = run(server, code)
        assert r["ok"], r
        assert "CONNECTED" not in r["stdout"] and r["stdout"].count("BLOCKED") == 4, r["stdout"]
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing from the sandbox ever arrived
    finally:
        listener.close()


def test_no_shadow_no_host_environment(server):
    code = r"""
import os
try:
    print(open("/etc/shadow").read())
    print("SHADOW_READ")
except OSError as e:
    print("SHADOW_BLOCKED", type(e).__name__)
print(dict(os.environ))
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            print(p, open(f"/proc/{p}/environ", "rb").read())
        except OSError as e:
            print(p, "environ blocked", type(e).__name__)
print(os.getuid(), os.getgid(), os.listdir("/"))
"""
    r = run(server, code)
    assert r["ok"], r
    text = r["stdout"] + r["stderr"]
    assert "SHADOW_BLOCKED" in text and "SHADOW_READ" not in text
    assert SECRET not in text and SECRET_NAME not in text
    assert "65534 65534" in text


def test_no_writes_outside_temp_folders(server):
    marker = "relay_escape_" + secrets.token_hex(6)
    host_paths = [f"/tmp/{marker}", str(REPO / marker), f"/root/{marker}", f"/{marker}"]
    code = f"""
import json, os
out = {{}}
for p in ["/usr/{marker}", "/etc/{marker}", "/{marker}", "/root/{marker}", "/home/{marker}",
          "/dev/{marker}", "/proc/{marker}", "/proc/sys/vm/drop_caches", "{REPO / marker}",
          "/tmp/{marker}", "/sandbox/{marker}", "/dev/shm/{marker}"]:
    try:
        with open(p, "w") as f:
            f.write("x")
        out[p] = "written"
    except OSError as e:
        out[p] = type(e).__name__
print(json.dumps(out))
"""
    r = run(server, code)
    assert r["ok"], r
    out = json.loads(r["stdout"])
    written = {p for p, v in out.items() if v == "written"}
    assert written == {f"/tmp/{marker}", f"/sandbox/{marker}", f"/dev/shm/{marker}"}, out
    for p in host_paths:  # the sandbox's /tmp is its own tmpfs: nothing reached the host
        assert not os.path.exists(p), p


def test_disk_fill_one_big_file(server):
    code = """
import errno
n = 0
try:
    with open("/tmp/big", "wb") as f:
        for _ in range(64):
            f.write(b"x" * 2**20)
            f.flush()
            n += 1
except OSError as e:
    print("STOPPED", errno.errorcode[e.errno], n)
"""
    r = run(server, code)
    assert r["ok"], r
    assert re.match(r"STOPPED (EFBIG|ENOSPC) \d+", r["stdout"]), r["stdout"]
    assert int(r["stdout"].split()[-1]) <= LIMITS["file_size_mb"]


def test_disk_fill_many_small_files(server):
    code = """
import errno, os
n = 0
try:
    for d in ("/tmp", "/sandbox", "/dev/shm"):
        while True:
            with open(f"{d}/f{n}", "wb") as f:
                f.write(b"y" * 4096)
            n += 1
except OSError as e:
    print("STOPPED", errno.errorcode[e.errno], n)
"""
    r = run(server, code)
    assert r["ok"], r
    m = re.match(r"STOPPED (\w+) (\d+)", r["stdout"])
    assert m and m.group(1) == "ENOSPC", r["stdout"]
    assert int(m.group(2)) <= LIMITS["tmpfs_mb"] * 2**20 // 4096  # the first tmpfs filled up


def test_100mb_of_output_is_truncated_with_bounded_memory(server):
    code = "import sys\nchunk = 'x' * 2**20\nfor _ in range(100):\n    sys.stdout.write(chunk)\nprint('end', file=sys.stderr)"
    r = run(server, code)
    assert r["exit_code"] == 0 and r["truncated"]
    assert r["stdout"].startswith("x" * 1000)
    assert r["stdout"].endswith(f"...[truncated {100 * 2**20 - LIMITS['max_output_bytes']} bytes]")
    assert len(r["stdout"]) < LIMITS["max_output_bytes"] + 100
    assert r["stderr"] == "end\n"
    with open(f"/proc/{server['pid']}/status") as f:
        peak_kb = int(next(line for line in f if line.startswith("VmHWM:")).split()[1])
    assert peak_kb < 100 * 1024, f"server peak RSS {peak_kb} kB: output was buffered"


def test_tool_call_cannot_raise_limits(server):
    r = run(
        server,
        "import time\ntime.sleep(30)\nprint('overslept')",
        timeout=99999,
        wall_timeout_s=99999,
        cpu_seconds=99999,
        memory_mb=99999,
        max_pids=99999,
        limits={"wall_timeout_s": 99999},
    )
    assert r["timed_out"] and "overslept" not in r["stdout"]
    r = run(server, "x = bytearray(512 * 2**20)\nprint('big')", memory_mb=4096)
    assert not r["ok"] and "big" not in r["stdout"]


def test_64_concurrent_mixed_runs(server):
    hostile = {
        "loop": "while True:\n    pass",
        "sleep": "import time\ntime.sleep(10**6)",
        "forkbomb": "import os, time\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        time.sleep(0.01)",
        "membomb": "x = bytearray(10**9)",
    }
    jobs = []
    for i in range(64):
        if i % 4 == 3:
            kind = list(hostile)[(i // 4) % 4]
            jobs.append((kind, hostile[kind], None))
        else:
            jobs.append(("normal", f"print(sum(range({i})) * {i})", f"{sum(range(i)) * i}\n"))
    with ThreadPoolExecutor(64) as pool:
        results = list(pool.map(lambda job: run(server, job[1]), jobs))
    for (kind, _, expected), r in zip(jobs, results):
        if kind == "normal":
            assert r["ok"] and r["stdout"] == expected, (kind, r)
        else:
            assert not r["ok"], (kind, r)


def test_tool_executor_runs_calls_in_parallel_and_serves_http(server):
    # The ToolExecutor (actors/tools.py) uses the same sandbox in-process and can serve it.
    from actors.tools import ToolExecutor
    from relay.config import ToolsConfig
    from relay.tools.calls import ToolCall
    from relay.tools.client import ToolClient
    from relay.tools.registry import ToolRegistry
    from relay.tools.sandbox import SandboxConfig

    reg = ToolRegistry()

    @reg.tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    ex = ToolExecutor(SandboxConfig(**LIMITS), registry=reg, max_workers=4)
    try:
        assert [s["function"]["name"] for s in ex.schemas()] == ["add", "python"]
        results = ex.run_batch(
            [ToolCall("python", {"code": f"print({i} ** 2)"}) for i in range(6)]
            + [
                ToolCall("add", {"a": 2, "b": 3}),
                ToolCall("python", {"code": "import time; time.sleep(60)"}),
                ToolCall("python", {"code": "print(1)", "timeout": 99999}),
                ToolCall("nope", {}),
            ]
        )
        assert [r.output for r in results[:6]] == [f"{i**2}\n" for i in range(6)]
        assert results[6].ok and results[6].output == "5"
        assert not results[7].ok and "timed out" in results[7].error
        assert not results[8].ok and "unexpected argument 'timeout'" in results[8].error
        assert not results[9].ok and "unknown tool 'nope'" in results[9].error
        url = ex.start_server()
        client = ToolClient(ToolsConfig(server_url=url, request_interval=0))
        assert client.health()["ok"]
        assert [r.output for r in client.execute_batch(["print('a')", "print('b')"])] == ["a\n", "b\n"]
    finally:
        ex.close()
