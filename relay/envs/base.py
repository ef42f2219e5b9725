"""The Environment protocol, and EnvRunner: many environment instances behind batched calls.

    class MyEnv:                                    # no base class: any object with these methods
        def reset(self, **row) -> str: ...          # a dataset row in, the first observation out
        def step(self, action: str) -> tuple[str, float, bool, dict]:   # observation, reward, done, info
        def get_state_description(self) -> str: ...
        def get_prompt_prefix(self) -> str: ...     # the system prompt ("" for none)

Named in config by dotted path (`task.env: my_pkg.envs:MyEnv`), built with no arguments, one
instance per episode in flight (EnvRunner pools and reuses them). The agent loop (relay/agent.py)
gives every model turn that is not a tool call to `step` as the action; the observation comes
back to the model as a user turn.

Rewards: the reward of each step lands in Sample.token_rewards at the last token of the model
turn that earned it (per-turn credit for token-level estimators) and in Sample.meta["env"]
["rewards"]; the final reward is the task's reward_fn, `episode_return` (the sum) for the
built-in environments.

Optional class-level hooks, used by the built-in tasks:
    make_rows(n, seed) -> list[dict]                   task rows when no task.train_file is given
    warm_start_trajectories(n, seed) -> list[Trajectory]  (relay.chat) example episodes for the
                                                        tiny model's warm start

Outside-world failures are data: an environment that raises in reset or step ends its episode
with the error recorded (StepResult.error); the instance is dropped, never reused.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


class Environment(Protocol):
    def reset(self, **row: Any) -> str: ...

    def step(self, action: str) -> tuple[str, float, bool, dict]: ...

    def get_state_description(self) -> str: ...

    def get_prompt_prefix(self) -> str: ...


@dataclass
class ResetResult:
    observation: str = ""
    prompt_prefix: str = ""  # the environment's system prompt; "" for none
    error: str | None = None  # the environment raised: the episode ends before it starts


@dataclass
class StepResult:
    observation: str = ""
    reward: float = 0.0
    done: bool = True
    info: dict[str, Any] = field(default_factory=dict)
    error: str | None = None  # the environment raised: the episode ends, the error is recorded


def _error(where: str, e: Exception) -> str:
    """One line for the metrics and the sample's meta, then where it happened."""
    frames = traceback.format_exception(type(e), e, e.__traceback__, limit=-2)
    return f"environment raised in {where}: {type(e).__name__}: {e}\n" + "".join(frames[1:-1]).rstrip()


class EnvRunner:
    """Environment instances by episode id, with batched reset / step / close. Never raises on an
    environment's failure (that is data); raises on programming errors (unknown episode ids)."""

    def __init__(self, factory: Callable[[], Environment]):
        self.factory = factory
        self.live: dict[str, Environment] = {}
        self.free: list[Environment] = []  # finished instances, reset before reuse

    def reset(self, episode_ids: list[str], rows: list[dict[str, Any]]) -> list[ResetResult]:
        out = []
        for eid, row in zip(episode_ids, rows, strict=True):
            if eid in self.live:
                raise ValueError(f"episode {eid!r} is already running")
            try:
                env = self.free.pop() if self.free else self.factory()
                obs = env.reset(**row)
                prefix = env.get_prompt_prefix() or ""
            except Exception as e:
                out.append(ResetResult(error=_error("reset", e)))
                continue
            self.live[eid] = env
            out.append(ResetResult(str(obs), str(prefix)))
        return out

    def step(self, episode_ids: list[str], actions: list[str]) -> list[StepResult]:
        out = []
        for eid, action in zip(episode_ids, actions, strict=True):
            env = self.live[eid]
            try:
                obs, reward, done, info = env.step(action)
                res = StepResult(str(obs), float(reward), bool(done), dict(info or {}))
            except Exception as e:
                del self.live[eid]  # its state is unknown now: never reuse it
                out.append(StepResult(error=_error("step", e)))
                continue
            if res.done:
                self.free.append(self.live.pop(eid))
            out.append(res)
        return out

    def close(self, episode_ids: list[str]) -> None:
        """Episodes the agent loop ended (limits, errors): their instances go back to the pool."""
        for eid in episode_ids:
            if eid in self.live:
                self.free.append(self.live.pop(eid))


def episode_return(sample, env=None) -> float:
    """Reward function: the sum of the environment's step rewards (0 for an episode that failed)."""
    return float(sum(sample.meta.get("env", {}).get("rewards", [])))
