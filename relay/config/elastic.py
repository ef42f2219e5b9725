"""resources.rollout.count as a range: an elastic rollout pool (docs/cluster.md, "An elastic rollout pool").

    resources:
      rollout: {count: {min: 1, max: 4}, cpus: 8, gpus: 1, node_resource: rollout_node}

The run starts `min` workers, as a plain `count: min` would, and asks Ray's autoscaler for room for
up to `max` as rollout becomes the bottleneck; workers start on that room as it appears, and the
pool shrinks back to `min` when demand falls, so the autoscaler can take idle nodes back. The
policy (relay/run/elastic.py):
  - training.mode sync: grow by one when rollout took more than half the step; shrink by one after
    3 steps in a row in which it took less than a quarter (with one worker more or less the share
    moves about in proportion, so the gap between the two keeps the pool from see-sawing);
  - one_step_off / async: grow by one when fewer than half a step's groups are left waiting in the
    producer's buffer after a step took its batch (the learner is about to wait); shrink by one after
    3 steps in a row with a whole step's groups or more left waiting (rollout runs ahead).
In sync mode a step's prompts are split evenly over the workers, so the pool steps through the
counts that divide training.prompts_per_step (16 prompts, {min: 1, max: 4}: 1, 2, 4).
A plain integer is a fixed pool, as always.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from relay.config.resources import RoleResources


@dataclass(frozen=True)
class CountRange:
    min: int = 1
    max: int = 1

    def __str__(self) -> str:  # as it is written in YAML, for problem lines
        return f"{{min: {self.min}, max: {self.max}}}"


@dataclass(frozen=True)
class RolloutResources(RoleResources):
    count: int | CountRange = 1  # a range {min, max}: an elastic pool (this file's docstring)


def is_elastic(count: int | CountRange) -> bool:
    return isinstance(count, CountRange)


def count_range(count: int | CountRange) -> CountRange:
    """A plain count n is the range {min: n, max: n}."""
    return count if isinstance(count, CountRange) else CountRange(count, count)


def starting_count(count: int | CountRange) -> int:
    """The workers a run starts with (a range: its min)."""
    return count_range(count).min


def fixed(res: RoleResources) -> RoleResources:
    """`res` with a range's count replaced by its min: what the run starts with, for code that counts workers."""
    return replace(res, count=starting_count(res.count)) if is_elastic(res.count) else res


def count_problems(key: str, count: int | CountRange) -> list[str]:
    """One line per bad value of a role's count (`key`: resources.<role>.count)."""
    if not isinstance(count, CountRange):
        return [] if count >= 1 else [f"{key}: must be >= 1, got {count}"]
    if count.min < 1:
        return [f"{key}: min must be >= 1, got {count}"]
    if count.min > count.max:
        return [f"{key}: min must be <= max, got {count}"]
    return []


def sync_counts(count: CountRange, prompts_per_step: int) -> list[int]:
    """The worker counts a sync step can shard its prompts over evenly, within the range."""
    return [n for n in range(count.min, count.max + 1) if prompts_per_step % n == 0]


def validate_elastic(cfg) -> list[str]:
    """What an elastic pool needs of the rest of the config (`cfg`: a Config)."""
    count, t = cfg.resources.rollout.count, cfg.training
    if not is_elastic(count) or count_problems("", count):
        return []
    # resources.colocate=true (one actor is the learner and the one worker) is refused by validate_colocate
    if t.mode == "sync" and count.max > count.min and sync_counts(count, t.prompts_per_step) == [count.min]:
        return [
            f"resources.rollout.count={count}: no count above min divides training.prompts_per_step="
            f"{t.prompts_per_step} (sync mode splits a step's prompts evenly over the workers), so the pool could never grow"
        ]
    return []
