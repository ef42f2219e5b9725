"""One engine call at a time on a rollout worker that serves the endpoint, weight loads first.

A worker's engine is called from three threads once it serves /v1: the rollout's own (the agent
loop's generate), the endpoint's batcher (every HTTP request, in an episode or not), and the
worker's method thread (weight loads, sleep). Requests inside an episode are fenced by the run's
order: the rollout waits for its episodes, and the worker's next weight call only starts after the
rollout returned. A request outside episodes (endpoint.enabled, a client looking at the policy
mid-run) has no such order: without this fence it could be generated while `update_weights` copies
tensors in, from weights half old and half new, or run beside the rollout's own generate (neither
engine is thread-safe).

    engine = FencedEngine(engine)        # the worker hands this to the agent loop and the endpoint
    with engine.fence.generating():      # the batcher: the version read is the one generated with
        version, out = engine.weight_version, engine.generate(prompts, sampling)

A request that arrives during a weight load waits for it and is generated on the new weights; a
load waits for the engine call in flight (one batch of requests) to finish, then goes before every
request still waiting, so a stream of requests cannot hold a weight sync back. Reentrant on one
thread: rollout.partial loads staged weights between two chunks of its own generate.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from relay.engines.base import Completion, Engine, SamplingParams, Weights


class EngineFence:
    """An exclusive, reentrant lock whose loads go before waiting generates."""

    def __init__(self):
        self._cond = threading.Condition()
        self._owner: int | None = None  # the thread inside, and how many times
        self._depth = 0
        self.loads_waiting = 0
        self.generates_waiting = 0
        self.loading = False  # a weight load holds the engine now

    @contextmanager
    def generating(self) -> Iterator[None]:
        with self._hold(load=False):
            yield

    @contextmanager
    def loading_weights(self) -> Iterator[None]:
        with self._hold(load=True):
            yield

    @contextmanager
    def _hold(self, load: bool) -> Iterator[None]:
        me = threading.get_ident()
        with self._cond:
            if self._owner != me:
                if load:
                    self.loads_waiting += 1
                else:
                    self.generates_waiting += 1
                self._cond.notify_all()  # for whoever watches the queue (tests)
                try:
                    self._cond.wait_for(lambda: self._owner is None and (load or self.loads_waiting == 0))
                finally:
                    if load:
                        self.loads_waiting -= 1
                    else:
                        self.generates_waiting -= 1
                self._owner = me
            self._depth += 1
            outer_loading, self.loading = self.loading, self.loading or load
        try:
            yield
        finally:
            with self._cond:
                self._depth -= 1
                self.loading = outer_loading
                if self._depth == 0:
                    self._owner = None
                self._cond.notify_all()

    def wait_until(self, condition, timeout_s: float = 30.0) -> bool:
        """Wait until `condition(fence)` holds (tests: a request or a load is waiting)."""
        with self._cond:
            return self._cond.wait_for(lambda: condition(self), timeout_s)


class FencedEngine:
    """An Engine whose every call goes through one EngineFence: generate as a generate; weight
    loads, sleep and wake as loads (sleep moves the weights out). Anything else reaches the
    engine itself (tokenizer, weight_version, set_weight_version, ...)."""

    def __init__(self, engine: Engine):
        self.engine, self.fence = engine, EngineFence()

    def __getattr__(self, name: str) -> Any:  # only what this class does not define
        return getattr(self.engine, name)

    @property
    def weight_version(self) -> int:
        return self.engine.weight_version

    def generate(self, prompt_token_ids: list[list[int]], sampling: SamplingParams, **kwargs) -> list[list[Completion]]:
        with self.fence.generating():
            return self.engine.generate(prompt_token_ids, sampling, **kwargs)

    def update_weights(self, weights: Weights, version: int) -> None:
        with self.fence.loading_weights():
            self.engine.update_weights(weights, version)

    def sleep(self) -> None:
        with self.fence.loading_weights():
            self.engine.sleep()

    def wake(self) -> None:
        with self.fence.loading_weights():
            self.engine.wake()

    def shutdown(self) -> None:
        self.engine.shutdown()


def fenced(engine: Engine) -> FencedEngine:
    """`engine` behind a fence: itself where it already is one (the worker made it, and shares it)."""
    return engine if isinstance(engine, FencedEngine) else FencedEngine(engine)
