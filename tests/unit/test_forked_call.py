"""relay/envs/forked_call.py: a function run in a forked child under a wall-clock limit returns its
value; one that holds the interpreter inside one C call past the limit is killed on time, and what
it changed never reaches the caller; a child that raises or dies is one line, never a hang."""

import os
import time

import pytest

from relay.envs.forked_call import ForkedCallFailed, ForkedCallTimeout, run_in_fork

# About 15 s on a 2-core EPYC, in one C call no signal or thread switch interrupts: without the
# fork the test would take that long and fail its time check instead of hanging.
SLOW_EXPONENT = 2 * 10**7


def test_the_value_comes_back_pickled_and_large_results_pass_the_pipe():
    assert run_in_fork(lambda: {"result": 7**3}, 5.0) == {"result": 343}
    big = run_in_fork(lambda: "x" * 3_000_000, 5.0)  # larger than a pipe's buffer: read while it writes
    assert len(big) == 3_000_000


def test_a_call_holding_the_interpreter_is_stopped_at_the_limit_and_changes_nothing():
    state = {"calls": 0}

    def slow():
        state["calls"] += 1
        return 7**SLOW_EXPONENT

    start = time.perf_counter()
    with pytest.raises(ForkedCallTimeout, match="took longer than 0.3 s and was stopped"):
        run_in_fork(slow, 0.3)
    assert time.perf_counter() - start < 3.0
    assert state == {"calls": 0}  # the child's change died with it


def test_a_child_that_raises_or_dies_is_one_line():
    def raises():
        raise ValueError("bad\nargument")

    with pytest.raises(ForkedCallFailed, match="^ValueError: bad argument$"):
        run_in_fork(raises, 5.0)
    with pytest.raises(ForkedCallFailed, match="ended without a result"):
        run_in_fork(lambda: os._exit(3), 5.0)
    with pytest.raises(ForkedCallFailed, match="PicklingError|AttributeError|TypeError"):
        run_in_fork(lambda: lambda: 0, 5.0)  # a result that cannot be pickled
