"""Clean stop on SIGINT (Ctrl-C) and SIGTERM (what `ray job stop` sends).

The first signal asks the loop to stop after the step in progress (it then writes a checkpoint
when one is due or `checkpoint.on_stop` asks); a second one abandons that step at once. Either
way the run ends with RunStopped, which the driver turns into one line naming the exact
`--resume` command and the exit status a shell gives a process killed by that signal
(128 + signal number: 130 for SIGINT, 143 for SIGTERM), without a traceback.
"""

from __future__ import annotations

import os
import shlex
import signal
import threading
from pathlib import Path

from relay.checkpoint.atomic import latest_checkpoint
from relay.failures import RunFailed

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class RunStopped(BaseException):
    """The run stopped on a signal. A BaseException, like KeyboardInterrupt: a stop request is not
    an error for an `except Exception` on its way out to swallow."""

    def __init__(self, signum: int, run_dir: Path, step: int | None):
        super().__init__(f"stopped by {signal.Signals(signum).name} in {run_dir}")
        self.signum, self.run_dir = signum, Path(run_dir)
        self.step = step  # the last finished step; None: the step in progress was abandoned

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class StopOnSignal:
    """Context manager: while it is open, SIGINT / SIGTERM set `requested` (first) or abandon the
    step in progress (second, by raising KeyboardInterrupt, which Ray's blocking calls pass on).

    Enter it after ray.init, which installs its own SIGTERM handler. Off the main thread (a Ray
    Tune trial) Python allows no signal handlers: it then does nothing.
    """

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.signum: int | None = None
        self._abandoned = False
        self._previous: dict[int, object] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def _handle(self, signum, frame) -> None:
        if self.signum is None:
            self.signum = signum
            # os.write, not print: the handler may interrupt a print to the same stream.
            name = signal.Signals(signum).name
            os.write(2, f"\nrelay: {name}: stopping after the step in progress (again: abandon it)\n".encode())
        elif not self._abandoned:
            self._abandoned = True
            raise KeyboardInterrupt  # further signals are ignored: the actors are being shut down

    def stopped(self, step: int) -> RunStopped:
        """The exception the loop raises once step `step` (1-based) is finished."""
        return RunStopped(self.signum, self.run_dir, step)

    def __enter__(self) -> StopOnSignal:
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        if self.signum is not None and exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            raise RunStopped(self.signum, self.run_dir, None) from None
        return False


def resume_command(argv: list[str], run_dir: Path, program: str = "driver.py") -> str:
    """`python driver.py --resume ... run.name=<the run's folder name>`: the same arguments, so the
    same config; the folder's own name, since a fresh run may have been given `<name>-1`."""
    kept = [a for a in argv if a != "--resume" and not a.startswith("run.name=")]
    command = ["python", program] if program.endswith(".py") else program.split()  # `relay train`: as it is
    return shlex.join([*command, "--resume", *kept, f"run.name={Path(run_dir).name}"])


def stop_line(stopped: RunStopped, argv: list[str], program: str = "driver.py") -> str:
    """The one line a stopped run prints: what stopped, what is saved, the command that goes on."""
    name = signal.Signals(stopped.signum).name
    what = f"after step {stopped.step}" if stopped.step is not None else "abandoning the step in progress"
    ckpt = latest_checkpoint(stopped.run_dir / "checkpoints")
    saved = f"latest checkpoint {ckpt}" if ckpt else "no checkpoint yet (resuming starts over)"
    return f"relay: stopped by {name} {what}; {saved}; resume: {resume_command(argv, stopped.run_dir, program)}"


class HealthStopped(RunFailed):
    """A rule in health.stop_on fired (relay/health/): the run stopped after checkpointing the step."""

    def __init__(self, rule: str, step: int, run_dir: Path):
        super().__init__(f"health rule {rule} fired at step {step} (health.stop_on)")
        self.rule, self.step, self.run_dir = rule, step, Path(run_dir)


def health_stop_line(stopped: HealthStopped, argv: list[str], program: str = "driver.py") -> str:
    """The one line a health stop prints: the rule, the checkpoint, the command that goes on."""
    ckpt = latest_checkpoint(stopped.run_dir / "checkpoints")
    saved = f"latest checkpoint {ckpt}" if ckpt else "no checkpoint"
    resume = resume_command(argv, stopped.run_dir, program)
    return f"relay: health: stopped after step {stopped.step}: {stopped}; {saved}; resume: {resume}"
