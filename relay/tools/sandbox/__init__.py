"""Run untrusted, model-written Python code: bubblewrap + rlimits + a per-run cgroup.

The recipe is the only combination, of those measured, that met all six needs (no network, CPU
limit, memory limit, no writes outside a temp folder, process-count limit, wall kill of the whole
tree) on the machines relay targets:

- bubblewrap: every namespace unshared (the network namespace has only `lo`), uid/gid 65534,
  no capabilities, `--die-with-parent`, `--new-session`, a cleared environment, a fresh `/proc`
  and `/dev`, size-capped tmpfs for `/tmp` and the working folder `/sandbox`; Python started
  with `-I -S` (no user site, no site-packages, no PYTHON* variables);
- rlimits set in the child before exec: CPU, AS, FSIZE, NOFILE, CORE=0;
- a cgroup per run (v1: `memory` with `memsw`, `pids`; v2: `memory.max`, `memory.swap.max`,
  `pids.max`), the child placed in it before exec, swept (every pid killed) and removed after;
- a wall-clock kill of the whole tree: the process group, then the cgroup.

Traps this code is written around:
- RLIMIT_NPROC does nothing when the launcher is root: the pids cgroup bounds forks instead.
- `killpg` misses a `setsid()` double-fork escapee; bwrap's PID namespace does not. The code
  runs as pid 1 of that namespace (`--as-pid-1`): when it exits or is killed, the kernel kills
  every process left in the namespace, and `--die-with-parent` kills it when bwrap is killed.
  An escapee could still hold the output pipe open for a moment, so reading never waits for EOF
  after the process has exited (see `launch._collect`), and the cgroup is swept anyway.
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
- Read-only binds of the interpreter's own files only (its standard library, binary, loader and
  shared libraries, found by asking it once: mounts.py), not the host's whole `/usr`: no shell,
  compiler or other host program exists inside.
- `/proc`'s host-wide files and folders (kernel command line, version, modules, symbols,
  devices, interrupts, `/proc/sys`, ...) are covered by empty ones, and `/proc/meminfo` shows the
  run's memory limit (mounts.py).
- A seccomp filter (`--seccomp`, compiled by libseccomp: seccomp_filter.py) makes io_uring,
  bpf, perf_event_open, the keyring calls, open_by_handle_at, userfaultfd, ptrace and
  process_vm_*, kexec, module loading, mount and its new API, unshare and setns fail with EPERM,
  and kills a process that makes a system call through a foreign ABI (reported as SIGSYS).

Limits come only from `SandboxConfig` (tools.sandbox_limits, or the tool server's sandbox_limits).
Nothing a model writes in a tool call reaches this package except the code string.

`run_code` returns a `SandboxResult` for everything the code does (time-outs, kills, crashes)
and for per-run infrastructure failures (`error` set); it raises `SandboxUnavailable` only when
the sandbox cannot be built at all, which is a set-up problem to fix, not a model outcome.

The package:
    config.py    SandboxResult, SandboxUnavailable; SandboxConfig (the limits) from relay.config
    cgroups.py   cgroup layout discovery, the per-run cgroup, sweeping stale ones, swap probing
    mounts.py    the files the sandbox sees: the interpreter's own, and a covered /proc
    seccomp_filter.py  the system calls denied inside, compiled to BPF by libseccomp
    launch.py    the bubblewrap argv, rlimits, child set-up, output collection, the `_run` core
    here         the public API (sandbox_available, run_code, run_code_unsandboxed, make_runner)
                 and the availability probe behind it
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable

from relay.config import ConfigError, SandboxConfig, validate_sandbox_limits
from relay.tools.sandbox.cgroups import _CG_PREFIX, _cgroup_layout, _swap_total_kb, _sweep_stale_cgroups
from relay.tools.sandbox.config import SandboxResult, SandboxUnavailable
from relay.tools.sandbox.launch import MAIN, SANDBOX_UID, WORKDIR, _Launch, _run, _run_bwrap
from relay.tools.sandbox.mounts import interpreter_files
from relay.tools.sandbox.seccomp_filter import SeccompUnavailable, seccomp_program

__all__ = [
    "MAIN",
    "SANDBOX_UID",
    "WORKDIR",
    "SandboxConfig",
    "SandboxResult",
    "SandboxUnavailable",
    "make_runner",
    "run_code",
    "run_code_unsandboxed",
    "sandbox_available",
]

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------- availability

_probe_lock = threading.Lock()
_probe_cache: dict[tuple, tuple[_Launch | None, str]] = {}

_FIX_BWRAP = (
    "install bubblewrap (`apt-get install bubblewrap`, `dnf install bubblewrap`; scripts/setup.sh does it as root)"
)
_OPT_OUT = "or run without a sandbox (unsafe) with tools.sandbox=none"


def _probe(cfg: SandboxConfig) -> tuple[_Launch | None, str]:
    key = (cfg.python, cfg.ro_binds)  # the interpreter decides the files bound (mounts.py)
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
        return None, (
            f"no Python interpreter at {cfg.python} for the sandbox: install python3 from "
            f"the OS packages or set tools.sandbox_limits.python (and tools.sandbox_limits.ro_binds); "
            f"{_OPT_OUT}"
        )
    layout = _cgroup_layout()
    if isinstance(layout, str):
        return None, f"cgroups unavailable: {layout}; {_OPT_OUT}"
    if layout.version == 1 and not layout.memsw and _swap_total_kb() > 0:
        return None, (
            "cgroup v1 memory controller without memsw accounting while swap is on: the "
            "memory limit could be escaped into swap; boot with swapaccount=1 or turn swap "
            f"off; {_OPT_OUT}"
        )
    try:
        probe_dir = os.path.join(
            layout.parents["pids" if layout.version == 1 else ""], f"{_CG_PREFIX}-{os.getpid()}-probe"
        )
        os.mkdir(probe_dir)
        os.rmdir(probe_dir)
    except OSError as e:
        return None, (
            f"cannot create cgroups under {os.path.dirname(probe_dir)} ({e}): the sandbox "
            f"needs root or a delegated cgroup; {_OPT_OUT}"
        )
    _sweep_stale_cgroups(layout)
    try:
        help_text = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"bwrap does not run ({e}): {_FIX_BWRAP}"
    disable_userns = "--disable-userns" in help_text
    if "--size" not in help_text:
        return None, "bubblewrap is too old (needs --size, 0.5 or newer): upgrade bubblewrap"
    if "--seccomp" not in help_text:
        return None, "bubblewrap was built without --seccomp: upgrade bubblewrap"
    try:
        program = seccomp_program()
    except SeccompUnavailable as e:
        return None, f"{e}; {_OPT_OUT}"
    files = interpreter_files(cfg.python)
    if isinstance(files, str):
        return None, f"{files}; set tools.sandbox_limits.python to a working interpreter, {_OPT_OUT}"
    check = SandboxConfig(wall_timeout_s=20, python=cfg.python, ro_binds=cfg.ro_binds)
    failures = []
    candidates = [SANDBOX_UID, None] if os.geteuid() == 0 else [None]
    for uid in candidates:
        launch = _Launch(bwrap, uid, disable_userns, files, program)
        res = _run_bwrap("print('relay-sandbox-ok')", check, launch, layout)
        if res.ok and res.stdout.strip() == "relay-sandbox-ok":
            if uid is None and os.geteuid() == 0:
                log.warning(
                    "sandbox: unprivileged user namespaces are unavailable, so bwrap runs as "
                    "root and the sandbox's uid maps to host root (/proc/sys is covered "
                    "read-only). Enable them (sysctl user.max_user_namespaces, "
                    "kernel.unprivileged_userns_clone) for defense in depth."
                )
            return launch, "ok" if uid is not None or os.geteuid() != 0 else "ok (bwrap runs as root)"
        failures.append(
            f"as uid {os.geteuid() if uid is None else uid}: {(res.stderr or res.error or res.stdout).strip()[:300]}"
        )
    return None, (
        "bubblewrap cannot build the sandbox (" + "; ".join(failures) + "). User "
        "namespaces may be disabled (sysctl user.max_user_namespaces, "
        f"kernel.unprivileged_userns_clone, AppArmor's userns restriction); {_OPT_OUT}"
    )


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
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": tmp,
            "TMPDIR": tmp,
            "LANG": "C.UTF-8",
            "MALLOC_ARENA_MAX": "2",
        }
        return _run(
            code,
            cfg,
            lambda code_fd, data_fd: [python, "-I", "-S", f"/proc/self/fd/{code_fd}"],
            tmp,
            None,
            None,
            env,
            in_bwrap=False,
        )


def make_runner(mode: str = "bwrap", cfg: SandboxConfig | None = None) -> Callable[[str], SandboxResult]:
    """A function code -> SandboxResult for the sandbox mode (`tools.sandbox`) "bwrap" (default)
    or "none", with the limits `cfg` (`tools.sandbox_limits`).

    "bwrap" refuses (SandboxUnavailable) where the sandbox cannot be built, saying what is
    missing and how to fix it. "none" is the explicit opt-out: it warns loudly and runs code
    without isolation. Limits that fail relay.config's checks raise ConfigError (a ValueError).
    """
    cfg = cfg or SandboxConfig()
    problems = validate_sandbox_limits(cfg)
    if problems:
        raise ConfigError(problems)
    if mode == "bwrap":
        ok, reason = sandbox_available(cfg)
        if not ok:
            raise SandboxUnavailable(f"tools.sandbox=bwrap: {reason}")
        return functools.partial(run_code, cfg=cfg)
    if mode == "none":
        msg = (
            "tools.sandbox=none: model-written code runs WITHOUT A SANDBOX, as this user, with "
            "this machine's network, files and environment. Use only for trusted code."
        )
        log.warning(msg)
        warnings.warn(msg, RuntimeWarning, stacklevel=2)
        return functools.partial(run_code_unsandboxed, cfg=cfg)
    raise ValueError(f"unknown sandbox mode {mode!r}: expected 'bwrap' or 'none'")
