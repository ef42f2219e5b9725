"""What the sandbox sees of the host's files: only what its Python interpreter needs, and a /proc
that does not describe the host.

InterpreterFiles     the interpreter's own files: its standard library folders, and every file it
                     maps (the binary, the dynamic loader, the shared libraries of the binary and
                     of every standard extension module, the locale and gconv data), found by
                     asking the interpreter itself, once; plus the symlinks those files are
                     reached by (libz.so.1 -> libz.so.1.2.13, /usr/lib64/ld-linux-x86-64.so.2)
interpreter_files()  that discovery (cached per interpreter)
proc_cover_argv()    bwrap arguments that cover /proc's host-wide files and folders: empty files
                     for the kernel command line, version, modules, symbols, devices, interrupts
                     ..., an empty read-only /proc/sys and friends, and a /proc/meminfo that
                     shows the run's memory limit instead of the host's memory

Not hidden (bwrap cannot): the kernel release from uname(2), and the CPU model and host-wide
CPU times in /proc/cpuinfo and /proc/stat, which glibc and Python read to count CPUs.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

# Run by the sandbox's interpreter, outside the sandbox, as relay's own user, with the sandbox's
# flags and environment: load everything the standard library can load, then list what is mapped.
_DISCOVER = r"""
import importlib, json, os, sys, sysconfig, threading
t = threading.Thread(target=lambda: None); t.start(); t.join()
for d in sys.path:
    if os.path.isdir(d):
        for name in sorted(os.listdir(d)):
            if name.endswith(".so") and "." in name:
                try:
                    importlib.import_module(name.split(".")[0])
                except Exception:
                    pass
mapped = set()
with open("/proc/self/maps") as f:
    for line in f:
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and parts[5].startswith("/"):
            mapped.add(parts[5].rstrip("\n").removesuffix(" (deleted)"))
tz = (sysconfig.get_config_var("TZPATH") or "").split(os.pathsep)
print(json.dumps({"path": sys.path, "mapped": sorted(mapped), "tzpath": tz}))
"""

# Folders the dynamic loader and its symlinks live in, besides those of the mapped files.
_LOADER_DIRS = ("/lib64", "/usr/lib64", "/lib", "/usr/lib", "/lib32", "/usr/lib32")
# glibc loads it on demand (dlopen) to unwind a thread in pthread_exit or pthread_cancel.
_ON_DEMAND_LIBS = ("libgcc_s.so.1",)


@dataclass(frozen=True)
class InterpreterFiles:
    ro_binds: tuple[str, ...]  # host folders and files, bound read-only at the same place
    symlinks: tuple[tuple[str, str], ...]  # (target, link path), made inside the sandbox


def _inside(path: str, folders) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in folders)


@functools.lru_cache(maxsize=8)
def interpreter_files(python: str) -> InterpreterFiles | str:
    """The files `python` needs inside the sandbox, or a string saying why they cannot be found."""
    try:
        res = subprocess.run(
            [python, "-I", "-S", "-c", _DISCOVER],
            capture_output=True,
            text=True,
            timeout=120,
            cwd="/",
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        )
        found = json.loads(res.stdout)
    except (OSError, subprocess.SubprocessError, json.JSONDecodeError) as e:
        return f"cannot ask {python} which files it needs: {e}"
    folders = []
    for d in [*found["path"], *found["tzpath"]]:
        d = os.path.realpath(d) if d else d
        if d and os.path.isdir(d) and not _inside(d, folders):
            folders = [f for f in folders if not _inside(f, [d])] + [d]
    files = {os.path.realpath(p) for p in found["mapped"] if os.path.isfile(p)}
    binary = os.path.realpath(python)
    lib_dirs = {os.path.dirname(p) for p in files - {binary}}
    for d in sorted(lib_dirs):
        for name in _ON_DEMAND_LIBS:
            if os.path.exists(os.path.join(d, name)):
                files.add(os.path.realpath(os.path.join(d, name)))
    files = {p for p in files if not _inside(p, folders)}
    symlinks = []
    link, seen = python, set()
    while os.path.islink(link) and link not in seen:  # /usr/bin/python3 -> python3.11
        seen.add(link)
        target = os.readlink(link)
        symlinks.append((target, link))
        link = os.path.normpath(os.path.join(os.path.dirname(link), target))
    wanted = files | {binary}
    scan = {os.path.realpath(d) for d in [*lib_dirs, *_LOADER_DIRS] if os.path.isdir(d)}
    for d in sorted(scan):
        for name in sorted(os.listdir(d)):
            p = os.path.join(d, name)
            if os.path.islink(p) and p not in seen and os.path.realpath(p) in wanted:
                symlinks.append((os.readlink(p), p))
    return InterpreterFiles(tuple(folders) + tuple(sorted(files)), tuple(symlinks))


# World-readable /proc files that describe the host (its kernel, boot, devices, other tenants'
# activity) rather than the sandbox's own processes; each is covered by an empty file. (Files only
# root may read, such as slabinfo or timer_list, are already closed to the sandbox's uid.)
HIDDEN_PROC_FILES = (
    "cmdline",
    "version",
    "config.gz",
    "modules",
    "kallsyms",
    "keys",
    "key-users",
    "swaps",
    "partitions",
    "diskstats",
    "devices",
    "interrupts",
    "softirqs",
    "vmstat",
    "zoneinfo",
    "buddyinfo",
    "iomem",
    "ioports",
    "cgroups",
    "locks",
)
# Host-wide /proc folders (sysctls with the kernel version and boot id, drivers, buses, IRQs,
# pressure stall information); each is covered by an empty read-only tmpfs.
HIDDEN_PROC_DIRS = ("sys", "acpi", "bus", "driver", "fs", "irq", "pressure")


def meminfo(memory_mb: int) -> bytes:
    """A /proc/meminfo for a machine whose memory is the run's limit."""
    kb = memory_mb * 1024
    rows = [("MemTotal", kb), ("MemFree", kb), ("MemAvailable", kb), ("Buffers", 0), ("Cached", 0)]
    rows += [("SwapCached", 0), ("SwapTotal", 0), ("SwapFree", 0)]
    return "".join(f"{k + ':':<16}{v:>8} kB\n" for k, v in rows).encode()


def proc_cover_argv(memory_mb: int, data_fd: Callable[[bytes], int]) -> list[str]:
    """bwrap arguments, after `--proc /proc`, covering its host-wide parts. data_fd(content) gives
    a file descriptor holding `content` for `--ro-bind-data` (bwrap reads and closes each)."""
    argv = ["--ro-bind-data", str(data_fd(meminfo(memory_mb))), "/proc/meminfo"]
    for name in HIDDEN_PROC_FILES:
        if os.path.exists(f"/proc/{name}"):
            argv += ["--ro-bind-data", str(data_fd(b"")), f"/proc/{name}"]
    for name in HIDDEN_PROC_DIRS:
        if os.path.isdir(f"/proc/{name}"):
            argv += ["--tmpfs", f"/proc/{name}", "--remount-ro", f"/proc/{name}"]
    return argv
