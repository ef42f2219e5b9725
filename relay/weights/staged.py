"""rollout.partial: weights that reach a busy rollout worker, held until its rollout pauses.

The worker's weight calls run on a second lane (a Ray concurrency group) while a rollout runs on
the first. The engine is not thread-safe, so the lane only stages the load (a closure over the
payload, or the shared-memory version) and the rollout's own thread runs it at its next pause
point: between two generate chunks or two turns (relay/agent/loop.py AgentLoop, `pause`). Only the
newest staged version is kept: an older one would be replaced before it ran anyway.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class StagedWeights:
    def __init__(self, version: int):
        self._cond = threading.Condition()
        self._staged: tuple[int, Callable[[], float]] | None = None
        self.newest = version  # the newest version staged or loaded
        self.stages, self.loads, self.load_s = 0, 0, 0.0

    def stage(self, version: int, load: Callable[[], float]) -> None:
        """On the weight lane: `load()` copies `version` into the engine and returns its seconds."""
        with self._cond:
            if self._staged is None or version >= self._staged[0]:
                self._staged = (version, load)
            self.newest, self.stages = max(self.newest, version), self.stages + 1
            self._cond.notify_all()

    def load(self) -> int | None:
        """On the rollout's thread, at a pause point: load the newest staged weights, if any, and
        return their version (None: nothing staged)."""
        with self._cond:
            staged, self._staged = self._staged, None
        if staged is None:
            return None
        version, load = staged
        try:
            self.load_s += load()
        except Exception:
            # A shared-memory buffer overwritten while it was copied (relay/weights/shared_memory.py check):
            # the version that overwrote it is staged by now; without one, the failure is real.
            with self._cond:
                if self._staged is None:
                    raise
            return self.load()
        self.loads += 1
        return version

    def wait_for(self, version: int, timeout_s: float) -> bool:
        """Wait until `version` (or a newer one) is staged or loaded: the weights a call was made
        on were sent before it, but on the other lane they may arrive just after it starts."""
        with self._cond:
            return self._cond.wait_for(lambda: self.newest >= version, timeout_s)
