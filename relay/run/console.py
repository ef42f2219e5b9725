"""The console logger: one status line per step, as a rich progress bar on a terminal or as
plain lines every `console_every` steps elsewhere (Ray job logs, CI)."""

from __future__ import annotations

import time
from typing import IO

# (label, key, format) of the fields on the console line, in display order.
CONSOLE_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("reward", "reward/mean", "{:.4g}"),
    ("kl", "kl/mean", "{:.3g}"),
    ("tok/s", "rollout/tokens_per_s", "{:,.0f}"),
    ("step time", "time/step_s", "{:.2f}s"),
)


def format_line(metrics: dict[str, float], step: int, total: int) -> str:
    """One compact status line: `step 20/100 | reward 0.52 | kl 0.0012 | tok/s 9,120 | step time 0.41s`."""
    parts = [f"step {step}/{total}"]
    for label, key, fmt in CONSOLE_FIELDS:
        if key in metrics:
            parts.append(f"{label} {fmt.format(metrics[key])}")
    return " | ".join(parts)


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class ConsoleLogger:
    """A rich progress bar on a terminal; plain lines every `every` steps otherwise.

    Under `ray job submit`, in CI or when piped to a file, stdout is not a TTY and a redrawn bar
    would turn into thousands of lines of control codes, so then one line is printed at the
    first step, every `every` steps and at the last step. On a terminal the bar shows the
    latest values and the same line is printed above it every `every` steps as a record.
    """

    def __init__(
        self, total_steps: int, every: int = 10, file: IO[str] | None = None, force_terminal: bool | None = None
    ):
        from rich.console import Console

        self.total = max(int(total_steps), 1)
        self.every = max(int(every), 1)
        self.console = Console(file=file, force_terminal=force_terminal, highlight=False)
        self.live = self.console.is_terminal
        self._started = time.monotonic()
        self._first: tuple[float, int] | None = None  # (time, step) of the first log: ETA base
        self._progress = None
        if self.live:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(
                TextColumn("[bold]train"),
                BarColumn(bar_width=24),
                MofNCompleteColumn(),
                TextColumn("{task.fields[stats]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=self.console,
                refresh_per_second=4,
            )
            self._task = self._progress.add_task("train", total=self.total, stats="")
            self._progress.start()

    def log(self, metrics: dict[str, float], step: int) -> None:
        now = time.monotonic()
        first = self._first is None
        if first:
            # The rate is measured from here (not from start-up, which loads models and
            # engines), and from the resumed step on a resumed run.
            self._first = (now, step)
            if self._progress is not None:  # no 0 -> N jump in rich's speed estimate on resume
                self._progress.reset(self._task, completed=max(step - 1, 0))
        line = format_line(metrics, step, self.total)
        due = first or step % self.every == 0 or step >= self.total
        if self._progress is not None:
            stats = line.split(" | ", 1)[1] if " | " in line else ""
            self._progress.update(self._task, completed=min(step, self.total), stats=stats)
            if due:
                self._progress.console.print(line)
        elif due:
            t_first, step_first = self._first
            line += f" | elapsed {_duration(now - self._started)}"
            if step > step_first and step < self.total:
                per_step = (now - t_first) / (step - step_first)
                line += f" | eta {_duration(per_step * (self.total - step))}"
            # Print (not log): Ray's log monitor forwards driver stdout line by line.
            self.console.file.write(line + "\n")
            self.console.file.flush()

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
