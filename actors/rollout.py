"""RolloutWorker: one Engine and the agent loop (relay/agent/loop.py); returns Samples with exact token ids.

Single-turn tasks: the agent loop with no parser and no environment, one batched generate of
rollout.max_new_tokens. With tools.enabled or task.env: multi-turn episodes, whose tool calls run
on the ToolExecutor actors (or the HTTP tool server at tools.server_url) and whose environment
steps run on this worker's EnvPool actor.

The samples leave scored: a plain reward function runs here, in-process; with an EnvPool (task.env,
task.reward_actor) the worker has it score them, so the pool that ran an episode scores it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import ray
import torch

from actors.plumbing import RelayActor, peak_rss_mb
from actors.restarts import is_restarted_actor
from actors.serializable import unpicklable, unserializable_record
from actors.supervision import Call, EnvPoolCalls, Supervisor
from actors.weight_ends import ReceivesWeights
from relay.agent.loop import AgentLimits, AgentLoop
from relay.agent.metrics import episode_metrics, tool_call_counts
from relay.config import resolve_dotted
from relay.config.role_settings import RolloutSettings
from relay.endpoint.fence import FencedEngine
from relay.engines import make_engine
from relay.engines.base import Engine, SamplingParams
from relay.envs.chat import ChatFormat
from relay.envs.data import row_messages
from relay.envs.demonstrations import supervised_sample
from relay.envs.scoring import Scorer
from relay.failures import print_failure
from relay.fault_points import hit
from relay.tools.calls import ToolCall
from relay.tools.parsers import get_parser
from relay.tools.registry import ToolResult
from relay.types import Sample
from relay.weights.staged import StagedWeights
from relay.weights.transfer import WeightPayload

if TYPE_CHECKING:
    from relay.endpoint.rollout import AgentRollout
    from relay.endpoint.server import EndpointServer

# rollout.partial: how long a call waits for the weights it was made on, sent just before it on the
# other lane. A replacement worker that was never sent weights does not wait (the producer redoes
# what it ran on the wrong version).
CALL_WEIGHTS_WAIT_S = 30.0


class RolloutWorker(RelayActor, ReceivesWeights):
    # actors/plumbing.py; set where the work happens
    repr_format = "rollout-{index}, weights v{weights_version}, {last_rollout}, {tokens_per_s:.0f} tok/s"
    index, weights_version, rollout_version, tokens_per_s = 0, 0, None, 0.0

    def __init__(
        self,
        settings: RolloutSettings,
        model_path: str,
        worker_index: int,
        num_threads: int,
        env_pool=None,
        tool_executors: list | None = None,
        endpoint_token: str | None = None,
        engine: Engine | None = None,
    ):
        """`env_pool` and `tool_executors`: actor handles, or the actors' names (relay_trainer/pools.py),
        looked up here, so that each restart finds the current actors. `endpoint_token`: the run's
        bearer token (relay/endpoint/auth.py), by value, so a restarted worker accepts it too."""
        torch.set_num_threads(num_threads)
        env_pool, tool_executors = by_name(env_pool), [by_name(t) for t in tool_executors or []]
        self.settings, self.index = settings, worker_index  # the config sections it reads
        # `engine`: one made elsewhere (actors/colocated.py: an engine on the learner's own module)
        self.engine = engine if engine is not None else make_engine(settings.engine, model_path)
        serves = settings.endpoint.enabled or settings.task.agent
        if serves:  # the endpoint's requests, the agent loop and weight loads take turns (relay/endpoint/fence.py)
            self.engine = FencedEngine(self.engine)
        self.tokenizer = self.engine.tokenizer
        self.episodes_started = 0  # keeps episode ids unique across calls
        # A restarted worker's ids must not meet its lost episodes still held by a live EnvPool.
        self.life = f".p{os.getpid()}" if is_restarted_actor() else ""
        # deadlines on env and tool calls; a call whose actor died or hung is redone on the replacement
        self.faults = Supervisor(settings.call_timeout_s, settings.rollout_timeout_s)
        # Idle: the gaps between calls (waiting for weights or work), summed until the next rollout reports them.
        self.idle_since, self.idle_s = time.perf_counter(), 0.0
        self.busy_since = time.time()  # when the current call (or a stream's current group) began
        self.multi_turn = settings.tools.enabled or bool(settings.task.env) or bool(settings.task.agent)
        # rollout.partial: weight calls only stage the weights (second lane); the rollout loads them when it pauses
        self.staged = StagedWeights(self.engine.weight_version) if settings.rollout.partial else None
        # the worker's EnvPool (environments, task.reward_actor): resets, steps and scoring with deadlines
        self.env_pool = EnvPoolCalls(env_pool, self.faults, f"rollout-{worker_index} env") if env_pool else None
        # endpoint.enabled or task.agent: /v1 served from this engine (relay/endpoint/server.py)
        self.endpoint = start_endpoint(settings, self.engine, endpoint_token, env_pool) if serves else None
        self.agent = self._agent(env_pool, tool_executors or [])
        self.scorer = None if env_pool is not None else Scorer(resolve_dotted(settings.task.reward_fn_path))

    def _agent(self, env_pool, tool_executors: list) -> AgentLoop | AgentRollout:
        r, tl = self.settings.rollout, self.settings.tools
        if self.settings.task.agent:  # the agent programs run on the EnvPool, their calls reach self.endpoint
            if self.env_pool is None:
                raise ValueError("task.agent is set but this rollout worker was given no EnvPool")
            from relay.endpoint.rollout import AgentRollout  # aiohttp and the server: 0.2 s of every worker's start

            return AgentRollout(self.endpoint, self._run_agents)
        common = dict(system_prompt=self.settings.task.system_prompt, prompt_format=self.settings.task.prompt_format)
        if self.staged is not None:
            common.update(partial_chunk=r.partial_chunk, pause=self._pause)
        if not self.multi_turn:  # one turn of max_new_tokens: the budget is that turn
            limits = AgentLimits(
                max_turns=1, max_tool_turns=0, max_tokens_per_turn=r.max_new_tokens, max_total_tokens=r.max_new_tokens
            )
            return AgentLoop(self.engine, self.tokenizer, limits, **common)
        limits = AgentLimits.of(r, tl)
        run_tools, schemas = self._tool_runner(tool_executors) if tl.enabled else (None, None)
        env = {}
        if self.settings.task.env:
            if env_pool is None:
                raise ValueError("task.env is set but this rollout worker was given no EnvPool")
            pool = self.env_pool  # deadlines; a pool lost under the episodes raises ShardLost
            env = dict(env_reset=pool.reset, env_step=pool.step, env_close=pool.close)
        return AgentLoop(
            self.engine,
            self.tokenizer,
            limits,
            parser=get_parser(tl.parser) if tl.enabled else None,
            run_tools=run_tools,
            tool_schemas=schemas if tl.schemas_in_prompt else None,
            **common,
            **env,
        )

    def _tool_runner(self, executors: list):
        """run_tools(calls) -> results, and the tools' schemas, for the executor pool or the tool server."""
        tl = self.settings.tools
        if tl.server_url is not None:
            from relay.tools.client import ToolClient
            from relay.tools.registry import PythonTool, ToolRegistry

            registry = ToolRegistry([PythonTool.remote(ToolClient(tl)), *(resolve_dotted(f) for f in tl.functions)])
            threads = ThreadPoolExecutor(tl.max_workers, thread_name_prefix="relay-tool-client")
            return (lambda calls: list(threads.map(registry.call, calls))), registry.schemas()
        if not executors:
            raise ValueError("tools.enabled without tools.server_url needs ToolExecutor actors (relay_trainer/pools.py)")

        def run_tools(calls: list[ToolCall]) -> list[ToolResult]:
            # Round-robin over the executors; each runs its share in parallel threads. Tool calls are
            # pure, so a share whose executor died or hung is run again on its replacement.
            k = len(executors)
            shares = self.faults.get_all(
                [
                    Call(ex, lambda ex=ex, share=calls[i::k]: ex.run_batch.remote(share), f"tools-{i} tool calls")
                    for i, ex in enumerate(executors)
                    if calls[i::k]
                ]
            )
            results: list[ToolResult] = [None] * len(calls)  # type: ignore[list-item]
            for i, share in enumerate(shares):
                results[i::k] = share
            return results

        return run_tools, ray.get(executors[0].schemas.remote())

    def encode_prompt(self, row: dict[str, Any]) -> list[int]:
        """A single-turn prompt's ids, as the agent loop encodes them (benchmarks generate from these)."""
        fmt = ChatFormat(self.tokenizer, prompt_format=self.settings.task.prompt_format)
        return fmt.prompt_ids(row_messages(row, self.settings.task.system_prompt))

    def encode_conversations(self, conversations: list[list[dict]]) -> list[Sample]:
        """Demonstrations (sft.*) laid out token for token as this worker's agent loop lays out episodes
        (task.agent: as its endpoint serves a chat, every assistant turn closed by the model's end-of-turn token)."""
        stops = get_parser(self.settings.tools.parser).stop_strings if self.settings.tools.enabled else ()
        return [supervised_sample(self.agent.format, messages, stops) for messages in conversations]

    def sampling(self, step: int, greedy: bool = False, seed_index: int | None = None) -> SamplingParams:
        r, index = self.settings.rollout, self.index if seed_index is None else seed_index
        return SamplingParams(
            n=1 if greedy else r.n,
            temperature=0.0 if greedy else r.temperature,
            top_p=r.top_p,
            top_k=r.top_k,
            max_tokens=r.max_new_tokens,
            stop=r.stop,
            # A seed per (run, step, worker) makes rollouts reproducible, so a resumed run samples exactly
            # what the uninterrupted run sampled; a lost worker's shard redone here keeps its `seed_index`.
            seed=(self.settings.seed * 1_000_003 + step * 1_009 + index) % 2**31,
        )

    def rollout(
        self, rows: list[dict[str, Any]], step: int, first_group_id: int, greedy: bool = False, **seed: int
    ) -> tuple[list[Sample], dict[str, float]]:
        hit("rollout.generate")
        start, idle = self._begin()
        sampling = self.sampling(step, greedy, **seed)  # seed_index=k: worker k's lost shard (actors/supervision.py)
        samples = self._serializable(self.agent.run(rows, sampling, first_group_id=first_group_id, **self._episodes()))
        return samples, self._report(samples, time.perf_counter() - start, idle)

    def rollout_stream(
        self,
        rows: list[dict[str, Any]],
        step: int,
        first_group_id: int,
        greedy: bool = False,
        version: int | None = None,
    ) -> Iterator[tuple[list[Sample], dict[str, float]]]:
        """`rollout`, one group at a time: each group leaves scored as soon as its episodes end
        (continuous batching), while the others go on. Call it with
        `.options(num_returns="streaming")`; its metrics are those of `rollout`, per group.
        rollout.partial: `version`, the weights the call was made on; it starts on them or newer."""
        if self.staged is not None and version is not None and not (self.life and self.staged.stages == 0):
            self.staged.wait_for(version, CALL_WEIGHTS_WAIT_S)
        hit("rollout.generate")
        start, idle = self._begin()
        for group in self.agent.stream(
            rows, self.sampling(step, greedy), first_group_id=first_group_id, **self._episodes()
        ):
            seconds = time.perf_counter() - start
            group = self._serializable(group)
            yield group, self._report(group, seconds, idle)
            start, idle = time.perf_counter(), 0.0  # the scoring is not generation time

    def _begin(self) -> tuple[float, float]:
        start = time.perf_counter()
        idle, self.idle_s = self.idle_s + start - self.idle_since, 0.0
        self.episodes_started += 1
        self.busy_since = time.time()  # wall clock: the driver places it against its own (relay.run.timeline)
        return start, idle

    def _episodes(self) -> dict:
        return dict(
            episode_prefix=f"w{self.index}{self.life}-{self.episodes_started}",
            max_live=self.settings.rollout.max_live_episodes,
        )

    def _serializable(self, samples: list[Sample]) -> list[Sample]:
        """The samples, each one that would not pickle (model or environment data nested past the
        recursion limit, an object no pickler takes) replaced by its failed-sample record: one bad
        episode is counted (faults/unserializable_samples) instead of failing the whole return."""
        out = list(samples)
        for i, why in unpicklable(samples):
            self.faults.count("unserializable_samples")
            n = int(self.faults.totals["unserializable_samples"])
            where = f"episode {out[i].meta.get('episode_id', '?')}"
            print_failure(
                n,
                f"relay: {where} cannot be serialized ({why}); kept as a failed-sample record",
                f"relay: {n} episodes could not be serialized so far; the latest, {where}: {why}",
            )
            out[i] = unserializable_record(out[i], why)
        return out

    def _report(self, samples: list[Sample], seconds: float, idle: float) -> dict[str, float]:
        """Score the samples; the metrics of the call (or of one group of a stream)."""
        for s in samples:
            s.meta["worker"] = self.index
        reward_seconds = self.score(samples)  # records too: an environment pool hands their instances back
        for s in samples:
            if "unserializable" in s.meta:  # never trained on (relay/envs/scoring.py neutralizes it)
                s.reward, s.reward_error = 0.0, f"the episode could not be serialized: {s.meta['unserializable']}"
        tokens = sum(s.num_model_tokens for s in samples)
        metrics = {
            "rollout/tokens": tokens,
            "rollout/seconds": seconds,
            "rollout/tokens_per_s": tokens / max(seconds, 1e-9),
            "rollout/reward_seconds": reward_seconds,
            "rollout/idle_s": idle,  # waiting for weights or for work since the last call ended
            "rollout/worker": self.index,
            "rollout/started_at": self.busy_since,  # the busy span, scoring included: the timeline's bar
            "rollout/ended_at": time.time(),
        }
        # a stream's next group is busy from here: handing this one over is part of the call
        self.busy_since = metrics["rollout/ended_at"]
        self.idle_since = time.perf_counter()
        self.rollout_version, self.tokens_per_s = self.weights_version, metrics["rollout/tokens_per_s"]
        if self.settings.tools.enabled:
            metrics.update(tool_call_counts(samples))  # the driver sums them over workers
        metrics.update(self.faults.take())  # env and tool faults met on the way: the driver counts them
        if self.settings.task.agent:
            metrics.update(self.agent.metrics)  # agent/calls_mean, agent/history_splits, ...
        return {**metrics, **episode_metrics(samples)} if self.multi_turn else metrics

    def score(self, samples: list[Sample]) -> float:
        """Write each sample's reward and reward error (None: it has a reward); returns the seconds it took."""
        start = time.perf_counter()
        if self.scorer is not None:
            rewards, errors, _ = self.scorer.score(samples)  # what the reward function notes lands in s.meta
        else:
            rewards, errors, _, notes = self.env_pool.score(samples)
            for sample, note in zip(samples, notes):
                sample.meta.update(note)
        for sample, reward, error in zip(samples, rewards, errors):
            sample.reward, sample.reward_error = reward, error
        return time.perf_counter() - start

    @property
    def last_rollout(self) -> str:
        return "no rollout yet" if self.rollout_version is None else f"last rollout on v{self.rollout_version}"

    def sleep(self) -> None:
        self.engine.sleep()

    def _run_agents(self, episode_ids: list[str], rows: list[dict], urls: list[str], api_key: str) -> list:
        """task.agent: the programs of a rollout's episodes, on this worker's EnvPool (a deadline, as its other calls)."""
        pool = self.env_pool.pool
        submit = lambda: pool.run_agents.remote(episode_ids, rows, urls, api_key)  # noqa: E731
        return self.faults.env_call(pool, submit, f"rollout-{self.index} agent programs")

    def endpoint_address(self) -> tuple[str, str] | None:
        """(base URL, bearer token) of this worker's OpenAI-compatible endpoint; None without one."""
        return None if self.endpoint is None else (self.endpoint.url + "/v1", self.endpoint.token)

    def weight_version(self) -> int:
        return self.engine.weight_version

    # -- weight sync (relay_trainer/weights.py): the driver calls these by name; ReceivesWeights loads them

    def _pause(self) -> None:
        """rollout.partial, on the rollout's thread between two chunks or turns: load staged weights."""
        version = self.staged.load()
        if version is not None:
            self.weights_version = version

    def update_weights(self, weights: WeightPayload, version: int) -> float:
        """Load the payload the learner put in the object store; returns the seconds it took
        (rollout.partial: stages it for the rollout's next pause; 0 s)."""
        if self.staged is not None:
            self.staged.stage(version, lambda: self._load(weights, version))
            return 0.0
        self.idle_s += time.perf_counter() - self.idle_since
        seconds = self._load(weights, version)
        self.weights_version, self.idle_since = version, time.perf_counter()
        return seconds

    def load_shared_weights(self, written: None, version: int) -> float | None:
        """Load `version` from the learner's shared-memory buffer (`written`: its write, done). None
        from a replacement Ray built after a loss: it has not mapped the buffers (their names were
        unlinked at start-up), and the driver then sends it the weights through the object store."""
        if self.shared_weights is None:
            return None
        if self.staged is not None:
            self.staged.stage(version, lambda: self._load_shared(version))
            return 0.0
        self.idle_s += time.perf_counter() - self.idle_since
        seconds = self._load_shared(version)
        self.weights_version, self.idle_since = version, time.perf_counter()
        return seconds

    def receive_weights(self, version: int) -> float:
        """Load the broadcast into the engine as it arrives; returns the seconds it took."""
        self.idle_s += time.perf_counter() - self.idle_since
        seconds = self._receive(version)
        self.weights_version, self.idle_since = version, time.perf_counter()
        return seconds

    def peak_memory_mb(self) -> float:
        return peak_rss_mb()


def start_endpoint(settings: RolloutSettings, engine: Engine, token: str | None, env_pool=None) -> EndpointServer:
    """The worker's endpoint, on endpoint.host or else endpoint_host()."""
    from relay.endpoint.server import EndpointServer  # imported by the workers that serve one

    e, r = settings.endpoint, settings.rollout
    return EndpointServer(
        engine,
        host=e.host or endpoint_host(env_pool if settings.task.agent else None),
        port=e.port,
        parser=e.parser,
        model_name=e.model_name or settings.engine.model.path,
        max_tokens=r.max_tokens_per_turn or r.max_new_tokens,
        max_total_tokens=r.max_total_tokens,
        batch_wait_s=e.batch_wait_ms / 1000,
        token=token,
        idle_timeout_s=e.idle_timeout_s,
        body_timeout_s=e.body_timeout_s,
        max_connections=e.max_connections,
        max_connections_per_peer=e.max_connections_per_peer,
    )


def endpoint_host(env_pool) -> str:
    """Loopback, or this node's address where the agent programs' EnvPool is on another node (asked once)."""
    node = lambda _actor=None: ray.get_runtime_context().get_node_id()  # noqa: E731
    if env_pool is None or ray.get(by_name(env_pool).__ray_call__.remote(node), timeout=120) == node():
        return "127.0.0.1"
    return ray.util.get_node_ip_address()


def by_name(actor):
    """The actor handle for an actor's name (a str), or `actor` itself (a handle, or None)."""
    return ray.get_actor(actor) if isinstance(actor, str) else actor
