"""Starting one sandboxed run and collecting what it did.

_Launch        how bwrap is started on this machine (decided once by the availability probe)
_bwrap_argv()  the bubblewrap command line: namespaces, uid 65534, the interpreter's files
               read-only, a covered /proc, size-capped tmpfs for /tmp, /sandbox and /dev/shm,
               the code bound from a memfd, the seccomp filter
_rlimits(), _child_setup()
               what the forked child does before exec: join the run's cgroup, set rlimits,
               drop root
_collect()     reads stdout and stderr up to a cap each, never waiting for EOF past the exit
_run()         the core: start, watch, wall-clock kill of the whole tree, classify how the run
               ended (time-out, memory, CPU, signal), clean up
_run_bwrap()   _run inside bubblewrap with a fresh cgroup
"""

from __future__ import annotations

import os
import resource
import selectors
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from relay.config import SandboxConfig
from relay.tools.sandbox.cgroups import _CgroupLayout, _RunCgroup
from relay.tools.sandbox.config import SandboxResult
from relay.tools.sandbox.mounts import InterpreterFiles, proc_cover_argv

SANDBOX_UID = 65534  # "nobody" on Debian/Ubuntu/Fedora
WORKDIR = "/sandbox"  # the working folder inside the sandbox (a size-capped tmpfs)
MAIN = WORKDIR + "/main.py"  # the code, bound read-only
# After the sandboxed process has exited, how long to wait for the output pipes to close. Only an
# escapee that outlived the PID namespace teardown would hold them longer (it cannot: the code is
# pid 1 of that namespace, see the package docstring).
_EOF_GRACE_S = 0.5


@dataclass(frozen=True)
class _Launch:
    """How bwrap is started on this machine; decided once by the availability probe."""

    bwrap: str
    drop_to_uid: int | None  # start bwrap as this uid (relay runs as root); None: as ourselves
    disable_userns: bool  # bwrap knows --disable-userns
    files: InterpreterFiles  # all of the host's files the sandbox sees (besides tools.sandbox_limits.ro_binds)
    seccomp: bytes  # the BPF filter bwrap loads before it starts Python (seccomp_filter.py)


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


def _bwrap_argv(cfg: SandboxConfig, launch: _Launch, code_fd: int, data_fd: Callable[[bytes], int]) -> list[str]:
    """data_fd(content) gives a file descriptor holding `content`, which bwrap reads and closes."""
    tmpfs = str(cfg.tmpfs_mb * 1024 * 1024)
    argv = [
        launch.bwrap,
        "--unshare-all",  # user, ipc, pid, net (only lo), uts, cgroup namespaces
        "--unshare-user",
        "--uid",
        str(SANDBOX_UID),
        "--gid",
        str(SANDBOX_UID),
        "--die-with-parent",  # bwrap killed -> the sandbox's pid 1 dies -> the namespace dies
        # Python itself is pid 1 of the namespace: when it exits the kernel kills every process
        # left in the namespace (the setsid escapee included), and bwrap reaps it. With bwrap's
        # own init as pid 1, bwrap exits without reaping that init, leaving a zombie for the
        # host's pid 1 to collect (forever, where pid 1 does not reap).
        "--as-pid-1",
        "--new-session",  # no TIOCSTI into a terminal we might have
        "--cap-drop",
        "ALL",
        "--hostname",
        "sandbox",
        "--clearenv",
        "--setenv",
        "PATH",
        "/usr/local/bin:/usr/bin:/bin",
        "--setenv",
        "HOME",
        WORKDIR,
        "--setenv",
        "TMPDIR",
        "/tmp",
        "--setenv",
        "LANG",
        "C.UTF-8",
        # glibc reserves 64 MB of address space per thread arena; under RLIMIT_AS that makes a
        # handful of threads look like a memory bomb.
        "--setenv",
        "MALLOC_ARENA_MAX",
        "2",
    ]
    # Only the interpreter's own files, not the host's whole /usr: no shells, compilers or other
    # programs to run, and no host data beyond what Python itself reads.
    for path in launch.files.ro_binds:
        argv += ["--ro-bind", path, path]
    for link in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(link):
            argv += ["--symlink", os.readlink(link), link]
    for target, link in launch.files.symlinks:
        argv += ["--symlink", target, link]
    for path in cfg.ro_binds:
        argv += ["--ro-bind", path, path]
    argv += ["--proc", "/proc", *proc_cover_argv(cfg.memory_mb, data_fd)]
    argv += [
        "--dev",
        "/dev",
        "--size",
        tmpfs,
        "--tmpfs",
        "/dev/shm",
        "--remount-ro",
        "/dev",
        "--size",
        tmpfs,
        "--tmpfs",
        "/tmp",
        "--size",
        tmpfs,
        "--tmpfs",
        WORKDIR,
        "--ro-bind-data",
        str(code_fd),
        MAIN,
        "--chdir",
        WORKDIR,
        "--remount-ro",
        "/",
        "--seccomp",
        str(data_fd(launch.seccomp)),
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


def _run(
    code: str,
    cfg: SandboxConfig,
    argv_for: Callable[[int, Callable[[bytes], int]], list[str]],
    cwd: str,
    cgroup: _RunCgroup | None,
    drop_to_uid: int | None,
    env: dict[str, str],
    in_bwrap: bool,
) -> SandboxResult:
    """Start, watch and clean up one run. argv_for(code_fd, data_fd) builds the command; data_fd
    (content) makes one more file descriptor holding `content` that the command inherits."""
    t0 = time.monotonic()
    fds: list[int] = []  # memfds the command inherits; closed here once it has started
    proc = None

    def data_fd(content: bytes) -> int:
        fd = os.memfd_create("relay-sandbox-data", 0)  # a file that never touches the host's disk
        fds.append(fd)
        view = memoryview(content)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
        return fd

    def close_fds() -> None:
        while fds:
            os.close(fds.pop())

    try:
        setup = _child_setup(cgroup.procs_files if cgroup else [], _rlimits(cfg), drop_to_uid)
        try:
            code_fd = data_fd(code.encode("utf-8", errors="surrogatepass"))  # a file, never argv
            argv = argv_for(code_fd, data_fd)
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=cwd,
                env=env,
                pass_fds=tuple(fds),
                start_new_session=True,  # its own process group: the wall kill takes the group
                preexec_fn=setup,
            )
        except (OSError, subprocess.SubprocessError) as e:
            return SandboxResult("", "", None, seconds=time.monotonic() - t0, error=f"sandbox failed to start: {e}")
        finally:
            close_fds()

        def kill_tree() -> None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            if cgroup:
                cgroup.kill_all()

        out, err, out_drop, err_drop, timed_out = _collect(
            proc, cfg.max_output_bytes, t0 + cfg.wall_timeout_s, kill_tree
        )
        try:
            rc = proc.wait(timeout=max(0.1, t0 + cfg.wall_timeout_s - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_tree()
            rc = proc.wait()
        if cgroup:
            cgroup.kill_all()  # anything left (there should be nothing: the PID namespace is gone)
        res = SandboxResult(
            stdout=_text(out, out_drop),
            stderr=_text(err, err_drop),
            exit_code=None if timed_out else rc,
            timed_out=timed_out,
            truncated=bool(out_drop or err_drop),
            seconds=time.monotonic() - t0,
        )
        # bwrap reports a command killed by signal N as exit code 128+N (so an explicit
        # sys.exit(137) reads as SIGKILL too); Popen reports -N.
        sig = -rc if rc < 0 else rc - 128 if in_bwrap and rc > 128 else 0
        if cgroup and cgroup.oom_kills() > 0:  # the cause, even when the run then also ran out of time
            res.killed_reason = "memory"
        elif timed_out:
            res.killed_reason = "wall_timeout"
        elif sig == signal.SIGXCPU or (in_bwrap and sig == signal.SIGKILL):
            # In bwrap the code is pid 1 of its namespace: nothing inside can SIGKILL it, and we
            # did not (no time-out) nor did the OOM killer, so it was the kernel's RLIMIT_CPU.
            res.killed_reason = "cpu"
        elif sig == signal.SIGKILL:
            res.killed_reason = "SIGKILL"
        elif sig in (signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGSYS):
            # SIGSYS: the seccomp filter killed it (a system call through a foreign ABI)
            res.killed_reason = signal.Signals(sig).name
        res.error = _describe(res, cfg)
        return res
    finally:
        close_fds()
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
    return _run(
        code,
        cfg,
        lambda code_fd, data_fd: _bwrap_argv(cfg, launch, code_fd, data_fd),
        "/",
        cgroup,
        launch.drop_to_uid,
        {"PATH": "/usr/bin:/bin"},
        in_bwrap=True,
    )
