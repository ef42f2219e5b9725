"""Run untrusted, model-written Python code: bubblewrap + rlimits + a per-run cgroup.

The recipe is the one measured in FINDINGS.md ("The sandbox for model-written code"); it is the
only combination that met all six needs (no network, CPU limit, memory limit, no writes outside
a temp folder, process-count limit, wall kill of the whole tree) on the machines relay targets:

- bubblewrap: every namespace unshared (the network namespace has only `lo`), uid/gid 65534,
  no capabilities, `--die-with-parent`, `--new-session`, a cleared environment, read-only `/usr`,
  a fresh `/proc` and `/dev`, size-capped tmpfs for `/tmp` and the working folder `/sandbox`;
  Python started with `-I -S` (no user site, no site-packages, no PYTHON* variables);
- rlimits set in the child before exec: CPU, AS, FSIZE, NOFILE, CORE=0;
- a cgroup per run (v1: `memory` with `memsw`, `pids`; v2: `memory.max`, `memory.swap.max`,
  `pids.max`), the child placed in it before exec, swept (every pid killed) and removed after;
- a wall-clock kill of the whole tree: the process group, then the cgroup.

Traps this code is written around (FINDINGS.md):
- RLIMIT_NPROC does nothing when the launcher is root: the pids cgroup bounds forks instead.
- `killpg` misses a `setsid()` double-fork escapee; bwrap's PID namespace does not. The code
  runs as pid 1 of that namespace (`--as-pid-1`): when it exits or is killed, the kernel kills
  every process left in the namespace, and `--die-with-parent` kills it when bwrap is killed.
  An escapee could still hold the output pipe open for a moment, so reading never waits for EOF
  after the process has exited (see `_collect`), and the cgroup is swept anyway.
- rlimits alone do not stop disk filling through many small files: the tmpfs size does.

Beyond the recipe (each found by probing this machine, see the tests in tests/sandbox/):
- When relay runs as root, bwrap itself is started as uid 65534 (an unprivileged user
  namespace). Started as root, bwrap maps the sandbox's uid 65534 to host uid 0, and the
  sandboxed code could then write host files that are only guarded by ownership, e.g.
  `/proc/sys/vm/drop_caches`. If unprivileged user namespaces are disabled, relay falls back
  to starting bwrap as root and covers `/proc/sys` read-only (logged once).
- `/dev` is remounted read-only, with a size-capped tmpfs on `/dev/shm` (multiprocessing needs
  it); `--disable-userns` forbids nested user namespaces where bwrap supports it.
- A `cpu` cgroup quota (`cpu_cores`, default one core) per run, so one fork bomb gets one
  run's share of the CPU, not 32 processes' share, and concurrent normal runs still finish.
- The code is pid 1 (`--as-pid-1`), which the kernel shields from signals it has no handler
  for, so RLIMIT_CPU's soft limit equals its hard one (SIGKILL, not an ignorable SIGXCPU).
- The code reaches the sandbox through a memfd (`--ro-bind-data`): no argv size limit, nothing
  written to the host's disk.

Limits come only from `SandboxConfig` (the server/executor config). Nothing a model writes in a
tool call reaches this module except the code string.

`run_code` returns a `SandboxResult` for everything the code does (time-outs, kills, crashes)
and for per-run infrastructure failures (`error` set); it raises `SandboxUnavailable` only when
the sandbox cannot be built at all, which is a set-up problem to fix, not a model outcome.
"""
from __future__ import annotations

import functools
import logging
import os
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import asdict, dataclass, field
from typing import Callable

log = logging.getLogger(__name__)

SANDBOX_UID = 65534  # "nobody" on Debian/Ubuntu/Fedora
WORKDIR = "/sandbox"  # the working folder inside the sandbox (a size-capped tmpfs)
MAIN = WORKDIR + "/main.py"  # the code, bound read-only
_CG_PREFIX = "relay-sbx"
# After the sandboxed process has exited, how long to wait for the output pipes to close. Only an
# escapee that outlived the PID namespace teardown would hold them longer (it cannot: see above).
_EOF_GRACE_S = 0.5


@dataclass(frozen=True)
class SandboxConfig:
    wall_timeout_s: float = 10.0
    cpu_seconds: int = 5  # per process (RLIMIT_CPU): SIGKILL at the limit
    memory_mb: int = 256  # cgroup memory (+swap) of the whole run, and RLIMIT_AS of each process
    max_pids: int = 32  # processes + threads of the whole run (bwrap's two included)
    max_output_bytes: int = 64 * 1024  # per stream (stdout, stderr); the rest is counted and dropped
    tmpfs_mb: int = 16  # size of each writable tmpfs: /tmp, /sandbox, /dev/shm
    max_open_files: int = 64
    file_size_mb: int = 8  # RLIMIT_FSIZE: the largest file the code may write
    cpu_cores: float = 1.0  # cgroup CPU quota of the whole run (0: no quota)
    max_code_bytes: int = 1024 * 1024
    python: str = "/usr/bin/python3"  # the interpreter inside the sandbox; must live under /usr
    # Extra host paths bound read-only at the same place (e.g. an interpreter's prefix outside
    # /usr). Started as uid 65534, bwrap must be able to reach them as that user.
    ro_binds: tuple[str, ...] = ()

    def validate(self) -> list[str]:
        errors = []
        for name in ("wall_timeout_s", "cpu_seconds", "memory_mb", "max_pids", "max_output_bytes",
                     "tmpfs_mb", "max_open_files", "file_size_mb", "max_code_bytes"):
            if not getattr(self, name) > 0:
                errors.append(f"sandbox.{name} must be > 0, got {getattr(self, name)!r}")
        if self.cpu_cores < 0:
            errors.append(f"sandbox.cpu_cores must be >= 0, got {self.cpu_cores!r}")
        if self.max_pids < 4:
            errors.append("sandbox.max_pids must be >= 4 (bwrap and python use two)")
        return errors


@dataclass
class SandboxResult:
    stdout: str
    stderr: str
    exit_code: int | None  # None when the run never started or was killed on the wall clock
    timed_out: bool = False  # killed at wall_timeout_s
    killed_reason: str | None = None  # "wall_timeout" | "cpu" | "memory" | "SIGSEGV" ... | None
    truncated: bool = False  # some output was dropped (the text ends with "...[truncated N bytes]")
    seconds: float = 0.0
    error: str | None = None  # a human-readable line when the run did not succeed

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and self.killed_reason is None and self.error is None

    def to_json(self) -> dict:
        """The tool server's response body."""
        d = asdict(self)
        d["ok"] = self.ok
        return d


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot be built on this machine; the message says what is missing and how to fix it."""


# ----------------------------------------------------------------------------------- cgroups

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
        path = path[len(mount_root):]
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
            return (f"cgroup v2: cannot enable {wanted} for child cgroups of {base} ({e}). "
                    "Run relay as root in a cgroup it may delegate, e.g. "
                    "`systemd-run --scope -p Delegate=yes python -m relay.tools.server`, "
                    "with no other process in that cgroup")
        return _CgroupLayout(2, {"": base})
    missing = [c for c in ("memory", "pids") if c not in v1]
    return (f"no usable cgroup hierarchy: cgroup v1 controllers {missing} are not mounted and no "
            "cgroup v2 hierarchy offers memory and pids")


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


# ----------------------------------------------------------------------------------- launching

@dataclass(frozen=True)
class _Launch:
    """How bwrap is started on this machine; decided once by the availability probe."""
    bwrap: str
    drop_to_uid: int | None  # start bwrap as this uid (relay runs as root); None: as ourselves
    disable_userns: bool  # bwrap knows --disable-userns


def _rlimits(cfg: SandboxConfig) -> list[tuple[int, tuple[int, int]]]:
    mb = 1024 * 1024
    return [
        # soft = hard: SIGKILL at the limit. (A SIGXCPU soft limit would not work: the code runs
        # as pid 1 of its namespace, which the kernel shields from signals it has no handler for.)
        (resource.RLIMIT_CPU, (cfg.cpu_seconds, cfg.cpu_seconds)),
        (resource.RLIMIT_AS, (cfg.memory_mb * mb, cfg.memory_mb * mb)),
        (resource.RLIMIT_FSIZE, (cfg.file_size_mb * mb, cfg.file_size_mb * mb)),
        (resource.RLIMIT_NOFILE, (cfg.max_open_files, cfg.max_open_files)),
        (resource.RLIMIT_CORE, (0, 0)),
    ]


def _child_setup(procs_files: list[str], rlimits, drop_to_uid: int | None) -> Callable[[], None]:
    """Runs in the forked child before exec: join the run's cgroup, set rlimits, drop root.

    Kept to plain system calls (open/write/setrlimit/set*id) because it runs between fork and
    exec in a process whose parent may have other threads.
    """

    def setup() -> None:
        pid = str(os.getpid()).encode()
        for path in procs_files:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)
        for res, lim in rlimits:
            resource.setrlimit(res, lim)
        if drop_to_uid is not None:
            os.setgroups([])
            os.setresgid(drop_to_uid, drop_to_uid, drop_to_uid)
            os.setresuid(drop_to_uid, drop_to_uid, drop_to_uid)

    return setup


def _bwrap_argv(cfg: SandboxConfig, launch: _Launch, code_fd: int) -> list[str]:
    tmpfs = str(cfg.tmpfs_mb * 1024 * 1024)
    argv = [
        launch.bwrap,
        "--unshare-all",  # user, ipc, pid, net (only lo), uts, cgroup namespaces
        "--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
        "--die-with-parent",  # bwrap killed -> the sandbox's pid 1 dies -> the namespace dies
        # Python itself is pid 1 of the namespace: when it exits the kernel kills every process
        # left in the namespace (the setsid escapee included), and bwrap reaps it. With bwrap's
        # own init as pid 1, bwrap exits without reaping that init, leaving a zombie for the
        # host's pid 1 to collect (forever, where pid 1 does not reap).
        "--as-pid-1",
        "--new-session",  # no TIOCSTI into a terminal we might have
        "--cap-drop", "ALL",
        "--hostname", "sandbox",
        "--clearenv",
        "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin",
        "--setenv", "HOME", WORKDIR,
        "--setenv", "TMPDIR", "/tmp",
        "--setenv", "LANG", "C.UTF-8",
        # glibc reserves 64 MB of address space per thread arena; under RLIMIT_AS that makes a
        # handful of threads look like a memory bomb.
        "--setenv", "MALLOC_ARENA_MAX", "2",
        "--ro-bind", "/usr", "/usr",
    ]
    for link in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(link):
            argv += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            argv += ["--ro-bind", link, link]
    for path in cfg.ro_binds:
        argv += ["--ro-bind", path, path]
    argv += ["--proc", "/proc"]
    if launch.drop_to_uid is None and os.geteuid() == 0:
        # bwrap started as root maps uid 65534 inside to host root: ownership alone no longer
        # guards the host's sysctls, so cover them.
        argv += ["--ro-bind", "/proc/sys", "/proc/sys"]
    argv += [
        "--dev", "/dev",
        "--size", tmpfs, "--tmpfs", "/dev/shm",
        "--remount-ro", "/dev",
        "--size", tmpfs, "--tmpfs", "/tmp",
        "--size", tmpfs, "--tmpfs", WORKDIR,
        "--ro-bind-data", str(code_fd), MAIN,
        "--chdir", WORKDIR,
        "--remount-ro", "/",
    ]
    if launch.disable_userns:
        argv += ["--disable-userns"]
    argv += ["--", cfg.python, "-I", "-S", MAIN]
    return argv


def _collect(proc: subprocess.Popen, cap: int, deadline: float, on_timeout: Callable[[], None]):
    """Read stdout and stderr without blocking forever and without buffering more than `cap` each.

    Returns (stdout bytes, stderr bytes, dropped stdout bytes, dropped stderr bytes, timed_out).
    """
    sel = selectors.DefaultSelector()
    bufs = {}
    for stream in (proc.stdout, proc.stderr):
        os.set_blocking(stream.fileno(), False)
        bufs[stream.fileno()] = [bytearray(), 0]  # kept bytes, dropped bytes
        sel.register(stream.fileno(), selectors.EVENT_READ)
    timed_out, ended_at = False, None
    try:
        while sel.get_map():
            now = time.monotonic()
            if ended_at is None and proc.poll() is not None:
                ended_at = now
            if ended_at is None and now >= deadline:
                timed_out = True
                on_timeout()
                ended_at = now
            if ended_at is not None and now - ended_at > _EOF_GRACE_S:
                break  # something outside our wait still holds the pipe; stop reading
            wait = 0.05 if ended_at is not None else min(0.2, max(0.0, deadline - now))
            for key, _ in sel.select(wait):
                try:
                    chunk = os.read(key.fd, 65536)
                except BlockingIOError:
                    continue
                except OSError:
                    chunk = b""
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                buf = bufs[key.fd]
                room = cap - len(buf[0])
                if room > 0:
                    buf[0] += chunk[:room]
                buf[1] += max(0, len(chunk) - max(room, 0))
    finally:
        sel.close()
    out, err = bufs[proc.stdout.fileno()], bufs[proc.stderr.fileno()]
    return bytes(out[0]), bytes(err[0]), out[1], err[1], timed_out


def _text(data: bytes, dropped: int) -> str:
    text = data.decode("utf-8", errors="replace")
    if dropped:
        text += f"\n...[truncated {dropped} bytes]"
    return text


def _describe(res: SandboxResult, cfg: SandboxConfig) -> str | None:
    if res.timed_out:
        return f"timed out: killed after {cfg.wall_timeout_s:g} s (wall-clock limit)"
    if res.killed_reason == "memory":
        return f"killed: out of memory (limit {cfg.memory_mb} MB)"
    if res.killed_reason == "cpu":
        return f"killed: CPU time limit ({cfg.cpu_seconds} s)"
    if res.killed_reason:
        return f"killed by {res.killed_reason}"
    if res.exit_code not in (0, None):
        return f"exited with code {res.exit_code}"
    return None


def _run(code: str, cfg: SandboxConfig, argv_for: Callable[[int], list[str]], cwd: str,
         cgroup: _RunCgroup | None, drop_to_uid: int | None, env: dict[str, str],
         in_bwrap: bool) -> SandboxResult:
    """Start, watch and clean up one run. argv_for(code_fd) builds the command."""
    t0 = time.monotonic()
    code_fd, proc = -1, None
    try:
        setup = _child_setup(cgroup.procs_files if cgroup else [], _rlimits(cfg), drop_to_uid)
        try:
            code_fd = os.memfd_create("relay-code", 0)  # the code reaches bwrap as a file, never argv
            os.write(code_fd, code.encode("utf-8", errors="surrogatepass"))
            os.lseek(code_fd, 0, os.SEEK_SET)
            proc = subprocess.Popen(
                argv_for(code_fd), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, cwd=cwd, env=env, pass_fds=(code_fd,),
                start_new_session=True,  # its own process group: the wall kill takes the group
                preexec_fn=setup,
            )
        except (OSError, subprocess.SubprocessError) as e:
            return SandboxResult("", "", None, seconds=time.monotonic() - t0,
                                 error=f"sandbox failed to start: {e}")
        finally:
            if code_fd >= 0:
                os.close(code_fd)
                code_fd = -1

        def kill_tree() -> None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            if cgroup:
                cgroup.kill_all()

        out, err, out_drop, err_drop, timed_out = _collect(
            proc, cfg.max_output_bytes, t0 + cfg.wall_timeout_s, kill_tree)
        try:
            rc = proc.wait(timeout=max(0.1, t0 + cfg.wall_timeout_s - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_tree()
            rc = proc.wait()
        if cgroup:
            cgroup.kill_all()  # anything left (there should be nothing: the PID namespace is gone)
        res = SandboxResult(
            stdout=_text(out, out_drop), stderr=_text(err, err_drop),
            exit_code=None if timed_out else rc, timed_out=timed_out,
            truncated=bool(out_drop or err_drop), seconds=time.monotonic() - t0)
        # bwrap reports a command killed by signal N as exit code 128+N (so an explicit
        # sys.exit(137) reads as SIGKILL too); Popen reports -N.
        sig = -rc if rc < 0 else rc - 128 if in_bwrap and rc > 128 else 0
        if timed_out:
            res.killed_reason = "wall_timeout"
        elif cgroup and cgroup.oom_kills() > 0:
            res.killed_reason = "memory"
        elif sig == signal.SIGXCPU or (in_bwrap and sig == signal.SIGKILL):
            # In bwrap the code is pid 1 of its namespace: nothing inside can SIGKILL it, and we
            # did not (no time-out) nor did the OOM killer, so it was the kernel's RLIMIT_CPU.
            res.killed_reason = "cpu"
        elif sig == signal.SIGKILL:
            res.killed_reason = "SIGKILL"
        elif sig in (signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGILL, signal.SIGFPE):
            res.killed_reason = signal.Signals(sig).name
        res.error = _describe(res, cfg)
        return res
    finally:
        if code_fd >= 0:
            os.close(code_fd)
        if proc is not None:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                proc.wait()
            for stream in (proc.stdout, proc.stderr):
                stream.close()
        if cgroup:
            cgroup.kill_all()
            cgroup.remove()


def _run_bwrap(code: str, cfg: SandboxConfig, launch: _Launch, layout: _CgroupLayout) -> SandboxResult:
    try:
        cgroup = _RunCgroup(layout, cfg)
    except OSError as e:
        return SandboxResult("", "", None, error=f"sandbox failed to start: cannot create cgroup: {e}")
    return _run(code, cfg, lambda fd: _bwrap_argv(cfg, launch, fd), "/", cgroup, launch.drop_to_uid,
                {"PATH": "/usr/bin:/bin"}, in_bwrap=True)


# ----------------------------------------------------------------------------------- availability

_probe_lock = threading.Lock()
_probe_cache: dict[tuple, tuple[_Launch | None, str]] = {}

_FIX_BWRAP = ("install bubblewrap (`apt-get install bubblewrap`, `dnf install bubblewrap`; "
              "scripts/setup.sh does it as root)")
_OPT_OUT = "or run without a sandbox (unsafe) with tools.sandbox=none"


def _probe(cfg: SandboxConfig) -> tuple[_Launch | None, str]:
    key = (cfg.python, cfg.ro_binds)
    with _probe_lock:
        if key in _probe_cache:
            return _probe_cache[key]
        _probe_cache[key] = result = _probe_uncached(cfg)
        return result


def _probe_uncached(cfg: SandboxConfig) -> tuple[_Launch | None, str]:
    if not sys.platform.startswith("linux"):
        return None, f"the code sandbox needs Linux (bubblewrap, namespaces, cgroups); {_OPT_OUT}"
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return None, f"bubblewrap (bwrap) is not on PATH: {_FIX_BWRAP}, {_OPT_OUT}"
    if not os.path.isfile(cfg.python):
        return None, (f"no Python interpreter at {cfg.python} for the sandbox: install python3 from "
                      f"the OS packages or set sandbox.python (and sandbox.ro_binds); {_OPT_OUT}")
    layout = _cgroup_layout()
    if isinstance(layout, str):
        return None, f"cgroups unavailable: {layout}; {_OPT_OUT}"
    if layout.version == 1 and not layout.memsw and _swap_total_kb() > 0:
        return None, ("cgroup v1 memory controller without memsw accounting while swap is on: the "
                      "memory limit could be escaped into swap; boot with swapaccount=1 or turn swap "
                      f"off; {_OPT_OUT}")
    try:
        probe_dir = os.path.join(layout.parents["pids" if layout.version == 1 else ""],
                                 f"{_CG_PREFIX}-{os.getpid()}-probe")
        os.mkdir(probe_dir)
        os.rmdir(probe_dir)
    except OSError as e:
        return None, (f"cannot create cgroups under {os.path.dirname(probe_dir)} ({e}): the sandbox "
                      f"needs root or a delegated cgroup; {_OPT_OUT}")
    _sweep_stale_cgroups(layout)
    try:
        help_text = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"bwrap does not run ({e}): {_FIX_BWRAP}"
    disable_userns = "--disable-userns" in help_text
    if "--size" not in help_text:
        return None, "bubblewrap is too old (needs --size, 0.5 or newer): upgrade bubblewrap"
    check = SandboxConfig(wall_timeout_s=20, python=cfg.python, ro_binds=cfg.ro_binds)
    failures = []
    candidates = [SANDBOX_UID, None] if os.geteuid() == 0 else [None]
    for uid in candidates:
        launch = _Launch(bwrap, uid, disable_userns)
        res = _run_bwrap("print('relay-sandbox-ok')", check, launch, layout)
        if res.ok and res.stdout.strip() == "relay-sandbox-ok":
            if uid is None and os.geteuid() == 0:
                log.warning("sandbox: unprivileged user namespaces are unavailable, so bwrap runs as "
                            "root and the sandbox's uid maps to host root (/proc/sys is covered "
                            "read-only). Enable them (sysctl user.max_user_namespaces, "
                            "kernel.unprivileged_userns_clone) for defense in depth.")
            return launch, "ok" if uid is not None or os.geteuid() != 0 else "ok (bwrap runs as root)"
        failures.append(f"as uid {os.geteuid() if uid is None else uid}: "
                        f"{(res.stderr or res.error or res.stdout).strip()[:300]}")
    return None, ("bubblewrap cannot build the sandbox (" + "; ".join(failures) + "). User "
                  "namespaces may be disabled (sysctl user.max_user_namespaces, "
                  f"kernel.unprivileged_userns_clone, AppArmor's userns restriction); {_OPT_OUT}")


def sandbox_available(cfg: SandboxConfig | None = None) -> tuple[bool, str]:
    """(True, "ok") when run_code can build its sandbox here, else (False, what is missing and how to fix it).

    The first call runs one real sandboxed snippet (about 50 ms); the answer is cached.
    """
    launch, reason = _probe(cfg or SandboxConfig())
    return launch is not None, reason


def run_code(code: str, cfg: SandboxConfig | None = None) -> SandboxResult:
    """Run `code` with `python -I -S` inside the sandbox and return what happened, as data."""
    cfg = cfg or SandboxConfig()
    launch, reason = _probe(cfg)
    if launch is None:
        raise SandboxUnavailable(reason)
    if len(code.encode("utf-8", errors="surrogatepass")) > cfg.max_code_bytes:
        return SandboxResult("", "", None, error=f"code is larger than {cfg.max_code_bytes} bytes; not run")
    layout = _cgroup_layout()
    assert not isinstance(layout, str)
    return _run_bwrap(code, cfg, launch, layout)


# ----------------------------------------------------------------------------------- no sandbox

def run_code_unsandboxed(code: str, cfg: SandboxConfig | None = None) -> SandboxResult:
    """tools.sandbox=none: the code runs as this user, with this machine's network and files.

    Only rlimits, a temp working folder, a cleared environment and the wall-clock kill of its
    process group apply. A `setsid()` escapee survives it. For trusted code and debugging only.
    """
    cfg = cfg or SandboxConfig()
    if len(code.encode("utf-8", errors="surrogatepass")) > cfg.max_code_bytes:
        return SandboxResult("", "", None, error=f"code is larger than {cfg.max_code_bytes} bytes; not run")
    python = cfg.python if os.path.isfile(cfg.python) else sys.executable
    with tempfile.TemporaryDirectory(prefix="relay-unsandboxed-") as tmp:
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": tmp, "TMPDIR": tmp, "LANG": "C.UTF-8",
               "MALLOC_ARENA_MAX": "2"}
        return _run(code, cfg, lambda fd: [python, "-I", "-S", f"/proc/self/fd/{fd}"], tmp, None, None, env,
                    in_bwrap=False)


def make_runner(mode: str = "bwrap", cfg: SandboxConfig | None = None) -> Callable[[str], SandboxResult]:
    """A function code -> SandboxResult for `tools.sandbox` = "bwrap" (default) or "none".

    "bwrap" refuses (SandboxUnavailable) where the sandbox cannot be built, saying what is
    missing and how to fix it. "none" is the explicit opt-out: it warns loudly and runs code
    without isolation.
    """
    cfg = cfg or SandboxConfig()
    errors = cfg.validate()
    if errors:
        raise ValueError("; ".join(errors))
    if mode == "bwrap":
        ok, reason = sandbox_available(cfg)
        if not ok:
            raise SandboxUnavailable(f"tools.sandbox=bwrap: {reason}")
        return functools.partial(run_code, cfg=cfg)
    if mode == "none":
        msg = ("tools.sandbox=none: model-written code runs WITHOUT A SANDBOX, as this user, with "
               "this machine's network, files and environment. Use only for trusted code.")
        log.warning(msg)
        warnings.warn(msg, RuntimeWarning, stacklevel=2)
        return functools.partial(run_code_unsandboxed, cfg=cfg)
    raise ValueError(f"unknown sandbox mode {mode!r}: expected 'bwrap' or 'none'")
