"""When an elastic rollout pool grows or shrinks (resources.rollout.count: {min, max}); pure, no ray.
The driver side, which asks the autoscaler and starts and stops the workers, is
relay_trainer/elastic.py; the policy in words is relay/config/elastic.py's docstring.

The pool tracks `wanted`, the count it asks the autoscaler room for. A step's metrics say whether
rollout holds the step up (`demand` "grow"), has room to spare ("shrink"), or neither ("hold").
Growing is at once: room takes a while to appear, and the request only asks. Shrinking waits for
SHRINK_AFTER such steps in a row, so one fast step does not give a node back.
"""

from __future__ import annotations

from dataclasses import dataclass

from relay.run import metric_keys as keys

# training.mode sync: rollout's share of the step's wall time. With one worker more or less the
# share moves about in proportion, so a pool grown past GROW_SHARE lands above SHRINK_SHARE
# (0.5 with 1 worker is 0.33 with 2) and one shrunk below SHRINK_SHARE lands under GROW_SHARE.
GROW_SHARE = 0.5
SHRINK_SHARE = 0.25
# one_step_off / async: groups left waiting in the producer's buffer after a step took its batch,
# in steps' worth (training.prompts_per_step groups): the learner is about to wait below GROW_BACKLOG;
# rollout runs a whole step ahead at SHRINK_BACKLOG.
GROW_BACKLOG = 0.5
SHRINK_BACKLOG = 1.0
SHRINK_AFTER = 3  # steps in a row that ask to shrink before the pool gives a worker back


def demand(mode: str, metrics: dict[str, float], prompts_per_step: int) -> str:
    """Whether rollout asks the pool to "grow", "shrink" or "hold", from one step's metrics
    (time/step_s and time/rollout_s in sync mode; rollout/queue_depth in the overlapped modes)."""
    if mode == "sync":
        share = metrics[keys.ROLLOUT_S] / max(metrics[keys.STEP_S], 1e-9)
        return "grow" if share > GROW_SHARE else "shrink" if share < SHRINK_SHARE else "hold"
    backlog = metrics[keys.QUEUE_DEPTH] / max(prompts_per_step, 1)
    return "grow" if backlog < GROW_BACKLOG else "shrink" if backlog >= SHRINK_BACKLOG else "hold"


@dataclass
class PoolSize:
    """What the pool asks for, and how many steps in a row have asked it to shrink."""

    wanted: int
    quiet_steps: int = 0


def resize(size: PoolSize, counts: list[int], signal: str, workers: int) -> PoolSize:
    """The next PoolSize after a step whose `demand` was `signal`, with `workers` up. `counts`: the
    worker counts the pool may roll out on, ascending from min (sync: those that divide
    training.prompts_per_step). Grows one count at a time, and only once the workers asked for last
    time are up (a request the cluster cannot meet stays where it is rather than climbing to max);
    shrinks one count after SHRINK_AFTER steps in a row ask for it; never leaves `counts`."""
    if signal == "grow":
        above = [n for n in counts if n > size.wanted]
        return PoolSize(above[0] if above and workers >= size.wanted else size.wanted)
    if signal == "shrink":
        if size.quiet_steps + 1 < SHRINK_AFTER:
            return PoolSize(size.wanted, size.quiet_steps + 1)
        below = [n for n in counts if n < size.wanted]
        return PoolSize(below[-1] if below else size.wanted)  # and count the next SHRINK_AFTER afresh
    return PoolSize(size.wanted)


def usable(ready: int, counts: list[int]) -> int:
    """How many of `ready` workers roll out: the largest of `counts` (sorted, the worker counts the
    mode can use; sync: those that divide training.prompts_per_step) not above `ready`."""
    return max((n for n in counts if n <= ready), default=counts[0])
