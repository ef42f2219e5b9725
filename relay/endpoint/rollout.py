"""A rollout of agent-program episodes (task.agent): the rollout worker's side.

    agent = AgentRollout(server, run_programs)     # run_programs(ids, rows, urls, api_key) -> outcomes
    samples = agent.run(rows, sampling, first_group_id=0)

The same `run` / `stream` as the agent loop (relay/agent/loop.py), so the rollout worker calls it
alike: n episodes per row are opened on the worker's endpoint with the rollout's sampling, the
programs run (on the EnvPool: actors/env.py) with a client per episode, and once they return, each
episode's recorded calls become its samples (relay/endpoint/samples.py), grouped by row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from relay.endpoint.samples import AgentOutcome, agent_metrics, episode_samples
from relay.endpoint.server import EndpointServer
from relay.engines.base import SamplingParams
from relay.envs.chat import ChatFormat
from relay.types import Sample

RunPrograms = Callable[[list[str], list[dict], list[str], str], list[AgentOutcome]]


class AgentRollout:
    def __init__(self, server: EndpointServer, run_programs: RunPrograms):
        self.server, self.run_programs = server, run_programs
        # a chat request's layout without tools=, the model closing each turn with its own end-of-turn
        # token (no parser stop strings): how the supervised stage lays out demonstrations (sft.*)
        self.format = ChatFormat(server.tokenizer)
        self.metrics: dict[str, float] = {}  # the last call's agent/* metrics (calls, splits, ...)

    def run(self, rows: list[dict[str, Any]], sampling: SamplingParams, **kwargs) -> list[Sample]:
        return [s for group in self.stream(rows, sampling, **kwargs) for s in group]

    def stream(
        self,
        rows: list[dict[str, Any]],
        sampling: SamplingParams,
        *,
        n: int | None = None,
        first_group_id: int = 0,
        episode_prefix: str = "ep",
        max_live: int = 0,  # every episode of the call runs at once: the programs wait on the endpoint
    ) -> Iterator[list[Sample]]:
        """Each row's group of samples, in row order, once every program of the call returned."""
        n = sampling.n if n is None else n
        ids = [f"{episode_prefix}-{i}-{k}" for i in range(len(rows)) for k in range(n)]
        episode_rows = [row for row in rows for _ in range(n)]
        self.server.open(ids, sampling)
        try:
            outcomes = self.run_programs(
                ids, episode_rows, [self.server.episode_url(e) for e in ids], self.server.token
            )
        finally:
            records = self.server.close(ids)
        if len(outcomes) != len(ids):
            raise RuntimeError(f"the agent programs returned {len(outcomes)} outcomes for {len(ids)} episodes")
        groups: list[list[Sample]] = [[] for _ in rows]
        for j, (eid, outcome) in enumerate(zip(ids, outcomes)):
            i = j // n
            groups[i] += episode_samples(records[eid], outcome, rows[i], first_group_id + i, self.server.tokenizer)
        self.metrics = agent_metrics(list(records.values()), outcomes, [s for g in groups for s in g])
        yield from (g for g in groups if g)
