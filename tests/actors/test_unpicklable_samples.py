"""The rollout worker's serialize check (actors/serializable.py) in a real actor: a sample nested as
deep as the check lets through still comes back from a Ray actor, by a plain return and by a
streaming one (Ray pickles return values deeper in the stack than the method runs), with a margin."""

from __future__ import annotations

import pytest
import ray

from actors.serializable import unpicklable
from relay.types import Sample

pytestmark = pytest.mark.usefixtures("shared_ray")


def checking_worker():
    """A worker class made here, so Ray ships it by value (this test module is not importable in
    the actor). It checks as RolloutWorker does (rollout -> _serializable -> unpicklable), then returns."""

    def nested(depth: int) -> Sample:
        value: object = 1
        for _ in range(depth):
            value = [value]
        return Sample(prompt_ids=[1], tool_calls=[{"name": "f", "arguments": {"x": value}}])

    class Worker:
        def _serializable(self, samples: list[Sample]) -> list[Sample]:
            assert unpicklable(samples) == []
            return samples

        def deepest_passing(self) -> int:
            lo, hi = 1, 5_000
            while lo < hi:  # the deepest nesting the check lets through, here in the actor
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if self._passes([nested(mid)]) else (lo, mid - 1)
            return lo

        def _passes(self, samples: list[Sample]) -> bool:  # at _serializable's depth in the stack
            return not unpicklable(samples)

        def refused(self, depth: int) -> bool:
            return not self._passes([nested(depth)])

        def rollout(self, depth: int) -> tuple[list[Sample], dict]:
            return self._serializable([nested(depth)]), {}

        def rollout_unchecked(self, depth: int) -> tuple[list[Sample], dict]:
            return [nested(depth)], {}

        def rollout_stream(self, depth: int):
            for _ in range(2):
                yield self._serializable([nested(depth)]), {}

    return Worker


def test_what_the_check_passes_ray_can_return():
    worker = ray.remote(checking_worker()).remote()
    depth = ray.get(worker.deepest_passing.remote())
    assert 100 < depth < 1_000
    samples, _ = ray.get(worker.rollout.remote(depth))
    assert len(samples) == 1
    stream = worker.rollout_stream.options(num_returns="streaming").remote(depth)
    assert [len(ray.get(ref)[0]) for ref in stream] == [1, 1]
    assert ray.get(worker.refused.remote(depth + 1))  # and past it, refused
    # The check keeps a margin (PICKLE_HEADROOM): Ray itself still returns samples a little past its edge.
    assert len(ray.get(worker.rollout_unchecked.remote(depth + 16))[0]) == 1
