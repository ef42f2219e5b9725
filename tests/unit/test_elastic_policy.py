"""When an elastic rollout pool grows and shrinks (relay/run/elastic.py): pure functions of a step's metrics."""

import pytest

from relay.run import metric_keys as keys
from relay.run.elastic import SHRINK_AFTER, PoolSize, demand, resize, usable


def sync_step(rollout_s: float, step_s: float = 10.0) -> dict[str, float]:
    return {keys.ROLLOUT_S: rollout_s, keys.STEP_S: step_s}


@pytest.mark.parametrize("rollout_s, signal", [(6.0, "grow"), (5.0, "hold"), (3.0, "hold"), (2.0, "shrink")])
def test_sync_mode_reads_rollout_share_of_the_step(rollout_s, signal):
    assert demand("sync", sync_step(rollout_s), prompts_per_step=16) == signal


@pytest.mark.parametrize("depth, signal", [(0, "grow"), (7, "grow"), (8, "hold"), (15, "hold"), (16, "shrink")])
@pytest.mark.parametrize("mode", ["one_step_off", "async"])
def test_overlapped_modes_read_the_producer_queue_depth(mode, depth, signal):
    assert demand(mode, {keys.QUEUE_DEPTH: float(depth)}, prompts_per_step=16) == signal


def test_grows_one_count_at_a_time_up_to_max():
    size = PoolSize(1)
    for want in (2, 3, 4, 4):
        size = resize(size, [1, 2, 3, 4], "grow", workers=size.wanted)
        assert size.wanted == want


def test_does_not_ask_for_more_while_the_last_worker_has_not_come():
    assert resize(PoolSize(2), [1, 2, 3, 4], "grow", workers=1) == PoolSize(2)


def test_grows_through_the_counts_sync_can_split_over():
    assert resize(PoolSize(2), [1, 2, 4], "grow", workers=2) == PoolSize(4)
    assert resize(PoolSize(4), [1, 2, 4], "grow", workers=4) == PoolSize(4)


def test_shrinks_after_enough_quiet_steps_in_a_row_never_below_min():
    size = PoolSize(3)
    for _ in range(SHRINK_AFTER - 1):
        size = resize(size, [1, 2, 3], "shrink", workers=3)
        assert size.wanted == 3
    size = resize(size, [1, 2, 3], "shrink", workers=3)
    assert size == PoolSize(2)  # and the count starts afresh
    for _ in range(2 * SHRINK_AFTER):
        size = resize(size, [1, 2, 3], "shrink", workers=size.wanted)
    assert size.wanted == 1


def test_a_busy_step_resets_the_quiet_count():
    size = resize(resize(PoolSize(3), [1, 2, 3], "shrink", 3), [1, 2, 3], "hold", 3)
    assert size == PoolSize(3, quiet_steps=0)
    for _ in range(SHRINK_AFTER - 1):
        size = resize(size, [1, 2, 3], "shrink", 3)
    assert size.wanted == 3


def test_shrinking_lowers_a_request_still_waiting_for_room():
    size = PoolSize(4, quiet_steps=SHRINK_AFTER - 1)
    assert resize(size, [1, 2, 3, 4], "shrink", workers=2).wanted == 3


@pytest.mark.parametrize("ready, rolling", [(1, 1), (2, 2), (3, 2), (4, 4), (5, 4)])
def test_rolls_out_on_the_largest_usable_count(ready, rolling):
    assert usable(ready, [1, 2, 4]) == rolling
