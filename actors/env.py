"""EnvPool: environments (user code) and reward functions. Their failures become data, not crashes.

Rollout workers call reset / step / close by handle for the episodes they run (relay.envs.base.
EnvRunner holds the instances, one per episode in flight, reused); the driver calls score on the
pool that ran the episodes, so a reward function receives the episode's own environment.
"""

from __future__ import annotations

import dataclasses

from actors.plumbing import RelayActor
from relay.config import TaskConfig, resolve_dotted
from relay.endpoint.program import run_agent_programs
from relay.endpoint.samples import AgentOutcome
from relay.envs.base import EnvRunner, ResetResult, StepResult
from relay.envs.contract import EnvMaker
from relay.envs.scoring import Scorer
from relay.fault_points import hit
from relay.models.resolve import model_folder
from relay.types import Sample


class EnvPool(RelayActor):
    # actors/plumbing.py. Calls are environment resets and steps plus samples scored; errors are those that failed.
    repr_format = "env-{index}, {calls} calls, {errors} errors"
    index, calls, errors = 0, 0, 0

    def __init__(self, task: TaskConfig, index: int = 0):
        self.index = index
        task = with_model_folders(task)
        self.envs = EnvRunner(EnvMaker(resolve_dotted(task.env), task.env_config)) if task.env else None
        self.agent = resolve_dotted(task.agent) if task.agent else None  # task.agent: run(client, row)
        self.scorer = Scorer(resolve_dotted(task.reward_fn_path), self.envs)

    def reset(self, episode_ids: list[str], rows: list[dict]) -> list[ResetResult]:
        hit("env.reset")
        results = self.envs.reset(episode_ids, rows)
        self.calls += len(results)
        self.errors += sum(r.error is not None for r in results)
        return results

    def step(self, episode_ids: list[str], actions: list[str]) -> list[StepResult]:
        hit("env.step")
        results = self.envs.step(episode_ids, actions)
        self.calls += len(results)
        self.errors += sum(r.error is not None for r in results)
        return results

    def close(self, episode_ids: list[str]) -> None:
        self.envs.close(episode_ids)

    def run_agents(self, episode_ids: list[str], rows: list[dict], urls: list[str], api_key: str) -> list[AgentOutcome]:
        """task.agent: the agent program once per episode, all at once, each with a client of its own
        pointed at its episode's URL on the rollout worker's endpoint (relay/endpoint/program.py)."""
        outcomes = run_agent_programs(self.agent, list(zip(episode_ids, rows, urls)), api_key)
        self.calls, self.errors = self.calls + len(outcomes), self.errors + sum(o.error is not None for o in outcomes)
        return outcomes

    def score(self, samples: list[Sample]) -> tuple[list[float], list[str | None], dict[str, float], list[dict]]:
        """One reward per sample, why it has none (None: it has one), metrics (relay/envs/scoring.py),
        and the meta keys the reward function added to each sample (reasoning_gym's unparsed_answer):
        these samples are the pool's copies, so what it noted travels back with the rewards."""
        before = [set(s.meta) for s in samples]
        rewards, errors, metrics = self.scorer.score(samples)
        self.calls, self.errors = self.calls + len(samples), self.errors + sum(e is not None for e in errors)
        notes = [{k: v for k, v in s.meta.items() if k not in keys} for s, keys in zip(samples, before)]
        return rewards, errors, metrics, notes


def with_model_folders(task: TaskConfig) -> TaskConfig:
    """An environment that runs a model (textarena's frozen_policy opponent, env_config's
    opponent_model) gets folders: `tiny`, a GGUF or a named model resolved here as the driver
    resolves model.path, because relay/envs sits below relay/models and cannot resolve them."""
    m = task.env_config.get("opponent_model")
    if not m:
        return task
    folders = {"path": model_folder(m["path"], "model.path", task.env)}
    if m.get("tokenizer_path"):
        folders["tokenizer_path"] = model_folder(m["tokenizer_path"], "model.tokenizer_path")
    return dataclasses.replace(task, env_config={**task.env_config, "opponent_model": {**m, **folders}})
