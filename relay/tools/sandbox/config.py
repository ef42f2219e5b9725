"""What a sandboxed run is given and what it gives back.

    SandboxConfig       the limits of one run (the server/executor config; nothing a model writes
                        in a tool call reaches them)
    SandboxResult       what the run did, as data: output, exit code, time-out, kill reason, error
    SandboxUnavailable  raised only when the sandbox cannot be built on this machine
"""
from __future__ import annotations

from dataclasses import asdict, dataclass


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
