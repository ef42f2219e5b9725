"""What a sandboxed run is given and what it gives back.

SandboxConfig       the limits of one run: tools.sandbox_limits, or the tool server's
                    sandbox_limits (defined and checked with the config tree, relay.config;
                    nothing a model writes in a tool call reaches them)
SandboxResult       what the run did, as data: output, exit code, time-out, kill reason, error
SandboxUnavailable  raised only when the sandbox cannot be built on this machine
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from relay.config import SandboxConfig

__all__ = ["SandboxConfig", "SandboxResult", "SandboxUnavailable"]


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
