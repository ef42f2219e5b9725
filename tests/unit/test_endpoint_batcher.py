"""The endpoint's batcher (relay/endpoint/batcher.py): concurrent requests share engine calls by
sampling settings, each completion is cut to its own token limit, and a batch waits for the live
episodes' requests only as long as they keep coming."""

from __future__ import annotations

import time

from relay.endpoint.batcher import GenerateQueue
from relay.engines.base import Completion, SamplingParams


class CountingEngine:
    """Writes tokens 1, 2, 3, ... up to max_tokens for every prompt, and records each call."""

    weight_version = 4

    def __init__(self):
        self.calls: list[tuple[int, SamplingParams]] = []

    def generate(self, prompts, sampling):
        self.calls.append((len(prompts), sampling))
        ids = list(range(1, sampling.max_tokens + 1))
        return [[Completion(ids, [-0.5] * len(ids), "length") for _ in range(sampling.n)] for _ in prompts]


def test_requests_share_engine_calls_by_sampling_and_keep_their_own_limits():
    engine, waiting = CountingEngine(), 4
    queue = GenerateQueue(engine, wait_s=0.5, waiting_for=lambda: waiting)
    try:
        base = SamplingParams(temperature=1.0, seed=3)
        futures = [
            queue.submit([7], SamplingParams(temperature=1.0, seed=3, max_tokens=2), True),
            queue.submit([8], SamplingParams(temperature=1.0, seed=3, max_tokens=5), True),
            queue.submit([9], SamplingParams(temperature=0.0, seed=3, max_tokens=3), True),
            queue.submit([10], base, True),
        ]
        results = [f.result(timeout=10) for f in futures]
    finally:
        queue.close()
    assert sorted(n for n, _ in engine.calls) == [1, 3]  # one call per sampling setting, 4 requests
    first = next(s for n, s in engine.calls if n == 3)
    # the largest limit runs; an episode's seed moves on with each engine call (this one was the 1st or 2nd)
    assert first.max_tokens == 32 and first.seed in (3, 3 + 100_003)
    (short, _), (long, _) = results[0], results[1]
    assert short[0].token_ids == [1, 2] and short[0].finish_reason == "length"  # cut to its own limit
    assert long[0].token_ids == [1, 2, 3, 4, 5]
    assert all(version == 4 for _, version in results)


def test_a_batch_waits_for_live_episodes_only_while_requests_keep_coming():
    engine = CountingEngine()
    queue = GenerateQueue(engine, wait_s=0.05, waiting_for=lambda: 10)  # ten live episodes, one request
    try:
        start = time.monotonic()
        queue.submit([1], SamplingParams(max_tokens=1), True).result(timeout=10)
        waited = time.monotonic() - start
    finally:
        queue.close()
    assert 0.04 <= waited < 1.0  # one quiet window, not a wait for the nine others
    assert len(engine.calls) == 1
