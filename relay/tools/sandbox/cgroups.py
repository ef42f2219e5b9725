"""The cgroups of sandboxed runs: where they can be made, one per run, and sweeping stale ones.

_cgroup_layout()        v1 (memory, pids, cpu controllers) or v2 hierarchy this process may
                        make child cgroups in; or a string saying why there is none (cached)
_swap_total_kb()        swap on this machine (a v1 memory controller without memsw accounting
                        cannot contain a run while swap is on)
_RunCgroup              one run's cgroup(s): memory (+swap), pids and cpu limits set on
                        creation, joined by the child before exec, swept (every pid killed)
                        and removed after
_sweep_stale_cgroups()  removes run cgroups left by relay processes that died
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass, field

from relay.config import SandboxConfig

log = logging.getLogger(__name__)

_CG_PREFIX = "relay-sbx"


@dataclass(frozen=True)
class _CgroupLayout:
    version: int  # 1 or 2
    # v1: controller -> the directory new run cgroups are made in (this process's own cgroup in
    # that hierarchy); v2: {"": own cgroup directory}.
    parents: dict[str, str] = field(default_factory=dict)
    memsw: bool = False  # v1: memory.memsw.* exists


def _own_cgroups() -> dict[str, str]:
    """/proc/self/cgroup as {controller: path}; the v2 entry has key ""."""
    out = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                out[c] = path
    return out


def _cgroup_mounts() -> list[tuple[str, str, str, set[str]]]:
    """(fstype, mount root, mount point, super options) of every cgroup mount."""
    mounts = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            lf, rf = left.split(), right.split()
            if rf and rf[0] in ("cgroup", "cgroup2"):
                mounts.append((rf[0], lf[3], lf[4], set(rf[2].split(",")) if len(rf) > 2 else set()))
    return mounts


def _join(mount_point: str, mount_root: str, path: str) -> str:
    # Inside a cgroup namespace or a container the mount root may be a sub-path of the hierarchy.
    if mount_root != "/" and path.startswith(mount_root):
        path = path[len(mount_root) :]
    return os.path.join(mount_point, path.lstrip("/"))


@functools.lru_cache(maxsize=1)
def _cgroup_layout() -> _CgroupLayout | str:
    """The layout, or a string saying why cgroups cannot be used."""
    try:
        own, mounts = _own_cgroups(), _cgroup_mounts()
    except OSError as e:
        return f"cannot read /proc/self/cgroup or mountinfo: {e}"
    v1 = {}
    for fstype, root, point, opts in mounts:
        if fstype == "cgroup":
            for c in ("memory", "pids", "cpu"):
                if c in opts and c in own:
                    v1[c] = _join(point, root, own[c])
    if "memory" in v1 and "pids" in v1:
        memsw = os.path.exists(os.path.join(v1["memory"], "memory.memsw.limit_in_bytes"))
        return _CgroupLayout(1, v1, memsw)
    for fstype, root, point, _ in mounts:
        if fstype != "cgroup2" or "" not in own:
            continue
        base = _join(point, root, own[""])
        try:
            with open(os.path.join(base, "cgroup.controllers")) as f:
                available = set(f.read().split())
        except OSError:
            continue
        if not {"memory", "pids"} <= available:
            continue
        wanted = [c for c in ("memory", "pids", "cpu") if c in available]
        try:
            with open(os.path.join(base, "cgroup.subtree_control"), "w") as f:
                f.write(" ".join("+" + c for c in wanted))
        except OSError as e:
            return (
                f"cgroup v2: cannot enable {wanted} for child cgroups of {base} ({e}). "
                "Run relay as root in a cgroup it may delegate, e.g. "
                "`systemd-run --scope -p Delegate=yes python -m relay.tools.server`, "
                "with no other process in that cgroup"
            )
        return _CgroupLayout(2, {"": base})
    missing = [c for c in ("memory", "pids") if c not in v1]
    return (
        f"no usable cgroup hierarchy: cgroup v1 controllers {missing} are not mounted and no "
        "cgroup v2 hierarchy offers memory and pids"
    )


def _swap_total_kb() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("SwapTotal:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


class _RunCgroup:
    """The cgroup(s) of one run: created with limits, joined by the child, swept and removed."""

    _counter = 0
    _lock = threading.Lock()

    def __init__(self, layout: _CgroupLayout, cfg: SandboxConfig):
        with _RunCgroup._lock:
            _RunCgroup._counter += 1
            n = _RunCgroup._counter
        name = f"{_CG_PREFIX}-{os.getpid()}-{n}"
        self.layout = layout
        self.dirs: dict[str, str] = {}  # controller ("" on v2) -> directory
        mem = cfg.memory_mb * 1024 * 1024
        try:
            if layout.version == 1:
                for c in ("memory", "pids", "cpu"):
                    if c not in layout.parents:
                        continue
                    d = os.path.join(layout.parents[c], name)
                    os.mkdir(d)
                    self.dirs[c] = d
                d = self.dirs["memory"]
                _write(os.path.join(d, "memory.limit_in_bytes"), str(mem))
                if layout.memsw:  # memory + swap; must be set after (and be >=) the memory limit
                    _write(os.path.join(d, "memory.memsw.limit_in_bytes"), str(mem))
                _write(os.path.join(self.dirs["pids"], "pids.max"), str(cfg.max_pids))
                if "cpu" in self.dirs and cfg.cpu_cores > 0:
                    try:
                        _write(os.path.join(self.dirs["cpu"], "cpu.cfs_period_us"), "100000")
                        _write(os.path.join(self.dirs["cpu"], "cpu.cfs_quota_us"), str(int(cfg.cpu_cores * 100000)))
                    except OSError:
                        pass  # fairness, not containment: without CFS bandwidth control, group shares still apply
            else:
                d = os.path.join(layout.parents[""], name)
                os.mkdir(d)
                self.dirs[""] = d
                _write(os.path.join(d, "memory.max"), str(mem))
                if os.path.exists(os.path.join(d, "memory.swap.max")):
                    _write(os.path.join(d, "memory.swap.max"), "0")
                _write(os.path.join(d, "pids.max"), str(cfg.max_pids))
                if cfg.cpu_cores > 0 and os.path.exists(os.path.join(d, "cpu.max")):
                    try:
                        _write(os.path.join(d, "cpu.max"), f"{int(cfg.cpu_cores * 100000)} 100000")
                    except OSError:
                        pass  # fairness, not containment
        except BaseException:
            self.remove()
            raise

    @property
    def procs_files(self) -> list[str]:
        return [os.path.join(d, "cgroup.procs") for d in self.dirs.values()]

    def pids(self) -> list[int]:
        found = set()
        for f in self.procs_files:
            try:
                with open(f) as fh:
                    found.update(int(x) for x in fh.read().split())
            except (OSError, ValueError):
                pass
        return sorted(found)

    def kill_all(self, budget_s: float = 5.0) -> bool:
        """SIGKILL every process in the run's cgroup until none is left; True when empty."""
        kill_file = os.path.join(self.dirs.get("", ""), "cgroup.kill")
        if "" in self.dirs and os.path.exists(kill_file):
            try:
                _write(kill_file, "1")  # v2 (Linux 5.14+): the kernel kills the whole subtree at once
            except OSError:
                pass
        end = time.monotonic() + budget_s
        while True:
            pids = self.pids()
            if not pids:
                return True
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if time.monotonic() > end:
                return False
            time.sleep(0.005)

    def oom_kills(self) -> int:
        try:
            if self.layout.version == 1:
                with open(os.path.join(self.dirs["memory"], "memory.oom_control")) as f:
                    stats = dict(line.split() for line in f if line.strip())
                if "oom_kill" in stats:
                    return int(stats["oom_kill"])
                with open(os.path.join(self.dirs["memory"], "memory.failcnt")) as f:
                    return 0 if int(f.read()) == 0 else 1  # kernels before 4.13: no oom_kill counter
            with open(os.path.join(self.dirs[""], "memory.events")) as f:
                stats = dict(line.split() for line in f if line.strip())
            return int(stats.get("oom_kill", 0))
        except (OSError, ValueError, KeyError):
            return 0

    def remove(self) -> None:
        for d in self.dirs.values():
            for _ in range(200):  # exiting tasks can keep a cgroup busy for a few milliseconds
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.005)
            else:
                log.warning("sandbox: could not remove cgroup %s", d)
        self.dirs = {}


def _sweep_stale_cgroups(layout: _CgroupLayout) -> None:
    """Remove run cgroups left by relay processes that died (their names carry the owner's pid)."""
    for parent in set(layout.parents.values()):
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        for name in names:
            if not name.startswith(_CG_PREFIX + "-"):
                continue
            try:
                owner = int(name.split("-")[2])
            except (IndexError, ValueError):
                continue
            if owner == os.getpid() or os.path.exists(f"/proc/{owner}"):
                continue
            try:
                os.rmdir(os.path.join(parent, name))
            except OSError:
                pass
