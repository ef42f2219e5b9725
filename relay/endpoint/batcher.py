"""Concurrent requests into shared engine calls: the endpoint's one thread that calls the engine.

Episodes run concurrently and each sends one request at a time, so the engine is called with a
batch: the queue is taken once every live episode has a request waiting, or `wait_s` after the
last request arrived (no episode is held up longer than that by a slower one). Requests with
the same sampling settings share one `engine.generate`; their token limits and numbers of top
logprobs may differ: the call runs to the largest of each, and each completion is cut to its own
(a prefix of a sample is a sample: its tokens and logprobs stay exact). In-episode requests carry the rollout's seed, varied per
batch as the agent loop varies it per turn, so a rollout stays reproducible where its batches are.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field, replace

import torch

from relay.endpoint.fence import fenced
from relay.engines.base import Completion, Engine, SamplingParams

MAX_WAIT_WINDOWS = 20  # a steady trickle of requests cannot hold a batch back longer than this many windows


@dataclass
class Pending:
    prompt: list[int]
    sampling: SamplingParams
    vary_seed: bool  # an episode's request: the seed moves on with every batch
    future: Future = field(default_factory=Future)  # list[Completion] (sampling.n) and the weight version


class GenerateQueue:
    def __init__(self, engine: Engine, wait_s: float, waiting_for: Callable[[], int]):
        """`waiting_for()`: how many requests a full batch has (the live episodes; 1 when none)."""
        # every engine call holds the engine's fence: no weight load under it (relay/endpoint/fence.py)
        self.engine, self.wait_s, self.waiting_for = fenced(engine), wait_s, waiting_for
        self.cv = threading.Condition()
        self.queue: list[Pending] = []
        self.closed = False
        self.batches = 0  # engine calls made; also varies the in-episode seeds
        # torch's thread count is set per thread: the engine's thread takes its creator's (the actor's
        # CPU share). Left at the default, its idle OpenMP threads spin on the cores the HTTP threads need.
        self.torch_threads = torch.get_num_threads()
        self.thread = threading.Thread(target=self._loop, name="relay-endpoint-engine", daemon=True)
        self.thread.start()

    def submit(self, prompt: list[int], sampling: SamplingParams, vary_seed: bool) -> Future:
        item = Pending(prompt, sampling, vary_seed)
        with self.cv:
            if self.closed:
                raise RuntimeError("the endpoint is shut down")
            self.queue.append(item)
            self.cv.notify_all()
        return item.future

    def close(self) -> None:
        with self.cv:
            self.closed = True
            for item in self.queue:
                item.future.set_exception(RuntimeError("the endpoint is shut down"))
            self.queue = []
            self.cv.notify_all()
        self.thread.join(timeout=30)

    def _take(self) -> list[Pending]:
        with self.cv:
            while not self.queue and not self.closed:
                self.cv.wait()
            deadline = time.monotonic() + self.wait_s * MAX_WAIT_WINDOWS
            while not self.closed and len(self.queue) < max(1, self.waiting_for()):
                window = min(self.wait_s, deadline - time.monotonic())
                if window <= 0 or not self.cv.wait(timeout=window):
                    break  # nothing arrived for a whole window
            batch, self.queue = self.queue, []
            return batch

    def _loop(self) -> None:
        torch.set_num_threads(self.torch_threads)
        while not self.closed:
            batch = self._take()
            groups: dict[tuple, list[Pending]] = {}
            for item in batch:
                s = item.sampling
                groups.setdefault((s.n, s.temperature, s.top_p, s.top_k, s.stop, s.seed, item.vary_seed), []).append(
                    item
                )
            for items in groups.values():
                self._generate(items)

    def _generate(self, items: list[Pending]) -> None:
        first = items[0]
        seed = first.sampling.seed
        if first.vary_seed and seed is not None:
            seed = (seed + 100_003 * self.batches) % 2**31
        sampling = replace(
            first.sampling,
            max_tokens=max(i.sampling.max_tokens for i in items),
            top_logprobs=max(i.sampling.top_logprobs for i in items),  # asking for them changes no token
            seed=seed,
        )
        self.batches += 1
        try:
            with self.engine.fence.generating():  # the version read is the one the call generates with
                version = self.engine.weight_version
                out = self.engine.generate([i.prompt for i in items], sampling)
        except Exception as e:  # every request of the call gets the error (a 500 naming it)
            for item in items:
                item.future.set_exception(e)
            return
        for item, completions in zip(items, out):
            s = item.sampling
            item.future.set_result(([cut(c, s.max_tokens, s.top_logprobs) for c in completions], version))


def cut(c: Completion, max_tokens: int, top_k: int = 0) -> Completion:
    """One request's share of a shared call's completion: its tokens and its alternatives."""
    top = None if not top_k or c.top_logprobs is None else [alts[:top_k] for alts in c.top_logprobs[:max_tokens]]
    if len(c.token_ids) <= max_tokens:
        return replace(c, top_logprobs=top)
    versions = None if c.versions is None else c.versions[:max_tokens]
    return Completion(c.token_ids[:max_tokens], c.logprobs[:max_tokens], "length", versions, top)
