"""What relay is doing before training starts: Ray start, actor start, model load, evaluation.

Each phase that can take seconds is wrapped in `phase("...")`: a rich spinner on a terminal,
plain `relay: ...` lines otherwise (Ray job logs, CI), and the seconds it took once it ends,
so a user never watches a silent terminal and can see where start-up time goes.
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager


def say(message: str) -> None:
    print(f"relay: {message}", flush=True)


@contextmanager
def phase(message: str):
    start = time.perf_counter()
    if sys.stdout.isatty():
        from rich.console import Console

        with Console().status(f"relay: {message} ..."):
            yield
    else:
        say(f"{message} ...")
        yield
    say(f"{message}: {time.perf_counter() - start:.1f} s")
