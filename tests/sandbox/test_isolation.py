"""The sandbox's kernel and filesystem surface: the seccomp filter, the interpreter-only file view,
and a /proc that does not describe the host. Each probe runs inside the real sandbox (run_code)."""

from __future__ import annotations

import errno
import json
import os
import platform

import pytest

from relay.tools.sandbox import SandboxConfig, run_code, run_code_unsandboxed, sandbox_available
from relay.tools.sandbox.mounts import HIDDEN_PROC_DIRS, HIDDEN_PROC_FILES
from relay.tools.sandbox.seccomp_filter import DENIED_SYSCALLS, denied_syscall_numbers

OK, WHY = sandbox_available()
pytestmark = pytest.mark.skipif(not OK, reason=f"sandbox unavailable here: {WHY}")

CFG = SandboxConfig(wall_timeout_s=10, cpu_seconds=5, memory_mb=128, max_pids=16, tmpfs_mb=8)


def _syscall_probe(numbers: dict[str, int]) -> str:
    """Code that calls each syscall with all-zero arguments and prints {name: errno}."""
    return f"""
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
out = {{}}
for name, nr in {numbers!r}.items():
    ctypes.set_errno(0)
    rc = libc.syscall(*(ctypes.c_long(x) for x in (nr, 0, 0, 0, 0, 0)))
    out[name] = ctypes.get_errno() if rc == -1 else "returned %d" % rc
print(json.dumps(out))
"""


def test_every_denied_syscall_is_eperm_inside():
    numbers = denied_syscall_numbers()
    # Every name is known on the architectures relay runs on; none silently dropped.
    assert set(numbers) == set(DENIED_SYSCALLS)
    r = run_code(_syscall_probe(numbers), CFG)
    assert r.ok, r
    seen = json.loads(r.stdout)
    assert seen == {name: errno.EPERM for name in DENIED_SYSCALLS}, seen


def test_eperm_comes_from_the_filter():
    # Outside the sandbox the same harmless calls (NULL pointers, zero sizes) fail differently,
    # so the EPERM above is the filter's answer, not a missing capability's.
    harmless = ("io_uring_setup", "perf_event_open", "add_key", "request_key", "name_to_handle_at", "bpf")
    r = run_code_unsandboxed(_syscall_probe({k: v for k, v in denied_syscall_numbers().items() if k in harmless}), CFG)
    assert r.ok, r
    seen = json.loads(r.stdout)
    assert set(seen) == set(harmless) and all(e != errno.EPERM for e in seen.values()), seen


@pytest.mark.skipif(platform.machine() != "x86_64", reason="an i386 system call from x86_64 code")
def test_foreign_abi_syscall_kills_the_run():
    code = """
import ctypes, mmap
# mov eax, 20 (getpid in the i386 table); int 0x80; ret
page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
page.write(bytes([0xB8, 20, 0, 0, 0, 0xCD, 0x80, 0xC3]))
print("calling", flush=True)
print("returned", ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))())
"""
    r = run_code(code, CFG)
    assert r.stdout == "calling\n" and not r.ok
    assert r.killed_reason == "SIGSYS" and r.error == "killed by SIGSYS", r


def test_only_the_interpreters_files_are_visible():
    code = r"""
import json, os, shutil, subprocess, sys
fds = sorted(os.listdir("/proc/self/fd"))
import ctypes, decimal, hashlib, multiprocessing, sqlite3, ssl, zoneinfo
def walk(top):
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(top) for f in fs)
with multiprocessing.Pool(2) as pool:
    squares = pool.map(abs, [-1, -2, -3])
try:
    subprocess.run(["sh", "-c", "echo shell"], check=True)
    shell = "ran"
except OSError as e:
    shell = type(e).__name__
print(json.dumps({
    "root": sorted(os.listdir("/")),
    "usr_bin": sorted(os.listdir("/usr/bin")),
    "libs": [p for p in walk("/usr/lib") if not p.startswith(("/usr/lib/python3", "/usr/lib/locale"))],
    "which": [shutil.which(p) for p in ("sh", "bash", "gcc", "perl", "curl")],
    "shell": shell,
    "fds": fds,
    "sha": hashlib.sha256(b"x").hexdigest()[:8],
    "tz": str(zoneinfo.ZoneInfo("Europe/Paris")),
    "pool": squares,
    "exe": sys.executable,
}))
"""
    r = run_code(code, CFG)
    assert r.ok, r
    seen = json.loads(r.stdout)
    assert "etc" not in seen["root"] and "home" not in seen["root"] and "root" not in seen["root"]
    assert all(name.startswith("python3") for name in seen["usr_bin"]), seen["usr_bin"]
    assert seen["which"] == [None] * 5 and seen["shell"] == "FileNotFoundError"
    # Shared libraries and the loader's caches only: no host programs or data under /usr/lib.
    assert seen["libs"] and all(".so" in p or p.endswith(".cache") for p in seen["libs"]), seen["libs"]
    assert len(seen["libs"]) < 200
    # 0-2 and the one listdir opened: the code, filter and /proc data descriptors were closed by bwrap.
    assert seen["fds"] == ["0", "1", "2", "3"]
    assert seen["sha"] == "2d711642" and seen["tz"] == "Europe/Paris" and seen["pool"] == [1, 2, 3]


def test_proc_does_not_describe_the_host():
    with open("/proc/cmdline") as f:
        host_cmdline = f.read().strip()
    code = r"""
import json, os
out = {"files": {}, "dirs": {}, "writes": {}}
for name in FILES:
    try:
        out["files"][name] = open("/proc/" + name, "rb").read().decode("latin-1")
    except OSError as e:
        out["files"][name] = type(e).__name__
for name in DIRS:
    out["dirs"][name] = os.listdir("/proc/" + name) if os.path.isdir("/proc/" + name) else None
for p in ("/proc/sys/vm/drop_caches", "/proc/sys/kernel/hostname", "/proc/cmdline", "/proc/meminfo"):
    try:
        open(p, "w").write("1")
        out["writes"][p] = "written"
    except OSError as e:
        out["writes"][p] = type(e).__name__
out["meminfo"] = open("/proc/meminfo").read()
out["self"] = open("/proc/self/status").read().startswith("Name:")
print(json.dumps(out))
"""
    code = code.replace("FILES", repr(HIDDEN_PROC_FILES)).replace("DIRS", repr(HIDDEN_PROC_DIRS))
    r = run_code(code, CFG)
    assert r.ok, r
    seen = json.loads(r.stdout)
    for name, content in seen["files"].items():
        assert content in ("", "FileNotFoundError"), (name, content[:200])
        if os.path.exists(f"/proc/{name}"):
            assert content == "", name
    assert host_cmdline and host_cmdline not in r.stdout
    for name, listing in seen["dirs"].items():
        assert listing in ([], None), (name, listing)
        assert (listing == []) == os.path.isdir(f"/proc/{name}"), name
    assert not any(v == "written" for v in seen["writes"].values()), seen["writes"]
    assert seen["meminfo"].startswith(f"MemTotal:         {128 * 1024} kB\n"), seen["meminfo"]
    assert "\nSwapTotal:             0 kB\n" in seen["meminfo"]
    assert seen["self"]  # the sandbox's own processes stay visible
