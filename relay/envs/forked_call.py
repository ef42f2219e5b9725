"""A function run in a fork of this process under a wall-clock limit.

For pure-Python code an environment runs in its own process (bfcl-eval's simulated APIs) whose
arguments a model wrote: one such call can compute for minutes inside a single C call (MathAPI's
`base ** exponent` with a huge integer exponent). No thread or signal of the same process stops
that: CPython runs signal handlers and switches threads between bytecodes only, so a thread
waiting on it with a timeout does not even get the interpreter back until the call is done
(measured: `future.result(timeout=0.5)` on `7 ** (3 * 10**7)` returned after 33 s). A forked
child can be killed at the limit instead, and whatever the call changed dies with it; the caller
gets the child's return value (pickled through a pipe) or an exception, never a hang.

The child is a copy of this process made by fork (no start-up, no imports), so it only computes
and writes its result: it never touches the parent's threads, locks or connections, and ends with
os._exit (no atexit handlers, no buffered output flushed twice). POSIX only.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import time
from collections.abc import Callable
from typing import Any

_READ_SIZE = 1 << 16


class ForkedCallTimeout(TimeoutError):
    """The call took longer than its limit; its child was killed."""


class ForkedCallFailed(RuntimeError):
    """The child ended without a result: fn raised, its result could not be pickled, or it died."""


def run_in_fork(fn: Callable[[], Any], time_limit_s: float) -> Any:
    """fn()'s return value, computed in a forked child; ForkedCallTimeout after `time_limit_s`
    seconds of wall-clock time (the child is killed), ForkedCallFailed when the child gives none."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: compute, write, leave without running anything of the parent's
        os.close(read_end)
        try:
            payload = _outcome(fn)
            view = memoryview(payload)
            while view:
                view = view[os.write(write_end, view) :]
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        payload = _read_until(read_end, time.monotonic() + time_limit_s, pid, time_limit_s)
    finally:
        os.close(read_end)
        os.waitpid(pid, 0)  # reap the child (killed on a timeout)
    if not payload:
        raise ForkedCallFailed("the call's process ended without a result")
    ok, value = pickle.loads(payload)
    if not ok:
        raise ForkedCallFailed(value)
    return value


def _outcome(fn: Callable[[], Any]) -> bytes:
    """(True, result) or (False, one line saying what went wrong), pickled."""
    try:
        return pickle.dumps((True, fn()))
    except BaseException as e:  # the child must always answer: SystemExit, MemoryError, unpicklable results
        line = " ".join(f"{type(e).__name__}: {e}".split())
        return pickle.dumps((False, line))


def _read_until(fd: int, deadline: float, pid: int, time_limit_s: float) -> bytes:
    """Everything the child writes until it closes the pipe; kills it at the deadline."""
    chunks = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            os.kill(pid, signal.SIGKILL)
            raise ForkedCallTimeout(f"took longer than {time_limit_s:g} s and was stopped")
        chunk = os.read(fd, _READ_SIZE)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
