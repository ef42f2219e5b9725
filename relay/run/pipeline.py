"""Bookkeeping of the one_step_off and async pipelines (training.mode); pure, no ray.

Weight versions count updates: the learner trains step k on version k, and the rollout workers
run a call with the newest version sent to them before the call was made. A sample trained at
step k with weights version v is k - v versions stale.

GroupBuffer holds the groups (all samples of one prompt) that rollout calls finished, until a
step takes `prompts_per_step` of them. `room()` says how many more groups may be started now
so that, taken in order, none is older than `max_staleness` when it is trained; `take()` drops
the groups that came out older anyway (out-of-order completion), and the caller counts them or
draws their prompts again.

Every group has an index: the order its prompt was drawn in (it is also the samples' group_id),
so a test can count every prompt's group exactly once across a resume.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass

from relay.run import metric_keys as keys
from relay.types import Sample


@dataclass
class Group:
    index: int  # the order the group's prompt was drawn in; its samples' group_id
    samples: list[Sample]

    @property
    def version(self) -> int:
        return min(s.weight_version for s in self.samples)


class GroupBuffer:
    """Finished groups waiting to be trained, and the indices of groups still being rolled out.

    ordered=True (one_step_off): a step takes the lowest-index groups, and waits for any lower
    index still in flight, so each step trains exactly the prompts a synchronous loop one step
    ahead would (what makes resume exact). ordered=False (async): a step takes the oldest finished
    groups first, whatever order they were started in, so a slow episode holds nobody up.
    """

    def __init__(self, prompts_per_step: int, max_staleness: int, ordered: bool, next_step: int = 0, steps: int = 0):
        self.per_step, self.max_staleness, self.ordered = prompts_per_step, max_staleness, ordered
        self.steps = steps  # the run's last step: no group is started for after it (0: no end)
        self.next_step = next_step  # the step whose batch is taken next; it trains on that version
        self.ready: dict[int, Group] = {}
        self.in_flight: set[int] = set()

    def room(self, version: int) -> int:
        """How many groups may start now on weights `version`. Taken in order, a group with `ahead`
        groups before it is trained at step next_step + ahead // prompts_per_step; keeping that
        within version + max_staleness bounds its staleness."""
        ahead = len(self.in_flight) + len(self.ready)
        horizon = (
            version + self.max_staleness + 1 if not self.steps else min(version + self.max_staleness + 1, self.steps)
        )
        return max(0, (horizon - self.next_step) * self.per_step - ahead)

    def started(self, indices: list[int]) -> None:
        self.in_flight.update(indices)

    def put(self, samples: list[Sample]) -> None:
        """A finished call's samples (whole groups), keyed by group_id."""
        by_group: dict[int, list[Sample]] = {}
        for s in samples:
            by_group.setdefault(s.group_id, []).append(s)
        for index, group_samples in by_group.items():
            if index in self.ready:  # a redone call's groups arrive once: a second copy is a bug
                raise RuntimeError(f"GroupBuffer.put: group {index} is already in the buffer")
            self.in_flight.discard(index)
            self.ready[index] = Group(index, group_samples)

    def abandon(self, indices: list[int]) -> None:
        """Groups that will never arrive (their call failed): no longer in flight."""
        self.in_flight.difference_update(indices)

    def take(self) -> tuple[list[Group] | None, list[Group]]:
        """The next step's groups (None while too few are ready), and the groups dropped because
        they would be trained more than max_staleness versions after the weights that made them."""
        stale = [g for g in self.ready.values() if self.next_step - g.version > self.max_staleness]
        for g in stale:
            del self.ready[g.index]
        if self.ordered:
            first_missing = min(self.in_flight, default=float("inf"))
            candidates = sorted(i for i in self.ready if i < first_missing)
        else:
            candidates = [g.index for g in sorted(self.ready.values(), key=lambda g: (g.version, g.index))]
        if len(candidates) < self.per_step:
            return None, stale
        groups = [self.ready.pop(i) for i in candidates[: self.per_step]]
        self.next_step += 1
        return groups, stale

    def state_dict(self) -> dict:
        """The finished groups as JSON-able data (call only with nothing in flight)."""
        if self.in_flight:
            raise RuntimeError(f"GroupBuffer.state_dict with groups in flight: {sorted(self.in_flight)}")
        return {"groups": [[sample_to_json(s) for s in g.samples] for g in self.ready.values()]}

    def load_state_dict(self, state: dict) -> None:
        for group in state["groups"]:
            self.put([sample_from_json(s) for s in group])


def staleness_metrics(samples: list[Sample], version: int) -> dict[str, float]:
    """How many versions behind `version` (the one the update runs on) the trained samples are."""
    behind = [version - s.weight_version for s in samples]
    return {
        keys.STALENESS_MIN: float(min(behind)),
        keys.STALENESS_MEAN: statistics.fmean(behind),
        keys.STALENESS_MAX: float(max(behind)),
        keys.MIXED_SAMPLES: float(sum(len(set(s.token_versions)) > 1 for s in samples)),
    }


def pipeline_metrics(samples: list[Sample], step: int, seconds: dict[str, float], rollout_idle_s: float | None) -> dict:
    """Staleness over the step's samples and each role's idle share of the step's wall time: the
    learner waits for samples in the rollout phase; a worker idles between its calls."""
    step_s = max(seconds[keys.STEP_S], 1e-9)
    idle = {keys.LEARNER_WAIT_S: seconds[keys.ROLLOUT_S], keys.IDLE_LEARNER: seconds[keys.ROLLOUT_S] / step_s}
    if rollout_idle_s is not None:
        idle[keys.IDLE_ROLLOUT] = min(rollout_idle_s / step_s, 1.0)
    return {**staleness_metrics(samples, step), **idle}


def sample_to_json(sample: Sample) -> dict:
    return dataclasses.asdict(sample)


def sample_from_json(data: dict) -> Sample:
    """The inverse of sample_to_json after a trip through JSON (which makes int keys strings and
    tuples lists)."""
    data = dict(data)
    data["token_rewards"] = {int(k): v for k, v in data.get("token_rewards", {}).items()}
    data["turn_spans"] = [tuple(span) for span in data.get("turn_spans", [])]
    return Sample(**data)
