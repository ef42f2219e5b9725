"""The rollout side of training.mode one_step_off and async: calls kept in flight on the rollout
workers, their finished groups scored and moved into a bounded buffer (relay/pipeline.py).

A worker is a serial actor: the weights the driver sends after an update queue behind the calls
already given to it and reach it between two calls, so every call runs on one weight version and
its samples record it. The driver never waits for a sync; it waits only in `take`, for data.
"""

from __future__ import annotations

from collections.abc import Callable

import ray

from actors.weights import start_weight_sync
from relay import metric_keys as keys
from relay.config import Config
from relay.data import PromptIterator
from relay.pipeline import Group, GroupBuffer
from relay.run import merge_rollout_metrics
from relay.types import Sample

# Every call the buffer has room for is started at once, spread over the workers, and queues on its
# worker: while the driver waits on the learner, the workers still have work.


class RolloutProducer:
    def __init__(
        self,
        cfg: Config,
        actors,
        prompts: PromptIterator,
        score: Callable[[list[Sample]], dict[str, float]],
        start_step: int,
        state: dict | None = None,
    ):
        t = cfg.training
        if actors.rollout_sleeps:
            raise ValueError(
                f"training.mode={t.mode} overlaps rollout and training: set rollout.sleep_while_training=false"
            )
        self.cfg, self.actors, self.prompts, self.score = cfg, actors, prompts, score
        one_step_off = t.mode == "one_step_off"
        self.buffer = GroupBuffer(
            t.prompts_per_step,
            1 if one_step_off else t.max_staleness,
            ordered=one_step_off,
            next_step=start_step,
            steps=t.steps,
        )
        workers = len(actors.rollout)
        self.per_call = t.prompts_per_step // workers if one_step_off or not t.groups_per_call else t.groups_per_call
        self.version = start_step  # the newest weights sent to the workers
        self.calls: dict = {}  # ref -> (worker index, group indices)
        self.redo: list[tuple[int, dict]] = []  # (group index, prompt row) of stale groups drawn again
        self.rows: dict[int, dict] = {}  # prompt row of every group started and not yet trained
        self.next_group, self.calls_made = 0, 0
        self.weight_refs: list = []
        self.finished: list[dict] = []  # metrics of the calls received since the last take
        self.score_metrics: dict[str, float] = {}
        if state:
            self.buffer.load_state_dict(state["buffer"])
            self.next_group, self.calls_made = state["next_group"], state["calls_made"]
            self.redo = [(i, row) for i, row in state["redo"]]
            self.rows = {int(i): row for i, row in state["rows"].items()}

    # -- producer -----------------------------------------------------------------------------

    def fill(self) -> None:
        """Start calls while the buffer has room, each on the worker with the fewest queued."""
        room = self.buffer.room(self.version)
        load = [0] * len(self.actors.rollout)
        for worker, _ in self.calls.values():
            load[worker] += 1
        while room > 0:
            worker = load.index(min(load))
            size = min(self.per_call, room)
            batch = [self.redo.pop(0) for _ in range(min(size, len(self.redo)))]
            fresh = self.prompts.take(size - len(batch))
            batch += [(self.next_group + i, row) for i, row in enumerate(fresh)]
            self.next_group += len(fresh)
            indices = [i for i, _ in batch]
            self.rows.update(batch)
            # The worker numbers the groups 0..k-1; _receive maps them back to these indices.
            ref = self.actors.rollout[worker].rollout.remote(
                [row for _, row in batch], self.calls_made, first_group_id=0
            )
            self.calls[ref] = (worker, indices)
            self.buffer.started(indices)
            self.calls_made += 1
            load[worker] += 1
            room -= size

    def _receive(self, ref) -> None:
        _, indices = self.calls.pop(ref)
        samples, metrics = ray.get(ref)
        for s in samples:
            s.group_id = indices[s.group_id]
        for key, value in self.score(samples).items():  # counts: summed over the step's calls
            self.score_metrics[key] = self.score_metrics.get(key, 0.0) + value
        self.finished.append(metrics)
        self.buffer.put(samples)

    # -- consumer -----------------------------------------------------------------------------

    def take(self) -> tuple[list[Sample], dict[str, float]]:
        """The next step's samples: waits (learner idle) until enough groups are finished."""
        dropped = 0
        while True:
            groups, stale = self.buffer.take()
            dropped += len(stale)
            self._stale(stale)
            if groups is not None:
                break
            self.fill()  # dropped groups left room
            if not self.calls:
                raise RuntimeError("the pipeline has no rollout in flight and too few groups to train on")
            done, _ = ray.wait(list(self.calls), num_returns=1)
            self._receive(done[0])
        self.fill()
        for g in groups:
            del self.rows[g.index]
        metrics = {
            **merge_rollout_metrics(self.finished),
            **self.score_metrics,
            keys.QUEUE_DEPTH: float(len(self.buffer.ready)),
            keys.IN_FLIGHT: float(len(self.buffer.in_flight)),
            keys.DROPPED_STALE: float(dropped),
        }
        self.finished, self.score_metrics = [], {}
        return [s for g in sorted(groups, key=lambda g: g.index) for s in g.samples], metrics

    def _stale(self, groups: list[Group]) -> None:
        if self.cfg.training.stale_groups == "regenerate":
            self.redo += [(g.index, self.rows[g.index]) for g in groups]
        else:
            for g in groups:
                del self.rows[g.index]

    def sync_weights(self, version: int) -> None:
        """Send the learner's new weights without waiting: each worker loads them after its
        calls in flight, before the calls started from now on. A failed sync of the last round
        raises here."""
        ray.get(self.weight_refs)
        self.weight_refs = start_weight_sync(self.actors, version)
        self.version = version
        self.fill()

    def drain(self) -> None:
        """Wait for every call in flight and keep its groups (a checkpoint saves them)."""
        while self.calls:
            self._receive(next(iter(self.calls)))
        ray.get(self.weight_refs)

    def state_dict(self) -> dict:
        """Drains first: the finished groups are saved, so a resumed run trains each prompt once."""
        self.drain()
        return {
            "buffer": self.buffer.state_dict(),
            "next_group": self.next_group,
            "calls_made": self.calls_made,
            "redo": [list(item) for item in self.redo],
            "rows": {str(i): row for i, row in self.rows.items()},
        }
