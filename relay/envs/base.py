"""The Environment protocol, and EnvRunner: many environment instances behind batched calls.

    class MyEnv:                                    # no base class: any object with these methods
        def reset(self) -> str: ...                 # or reset(self, **row) / reset(self, seed=None)
        def step(self, action: str) -> tuple[str, float, bool, dict]:   # observation, reward, done, info
        def get_state_description(self) -> str: ...
        def get_prompt_prefix(self) -> str: ...     # the system prompt ("" for none)

Named in config by dotted path (`task.env: my_pkg.envs:MyEnv`), built as relay/envs/contract.py
describes (`MyEnv(config)` with `task.env_config`, or `MyEnv()`), one instance per episode in
flight (EnvRunner pools and reuses them). The agent loop (relay/agent/loop.py) gives every model turn
that is not a tool call to `step` as the action; the observation comes back to the model as a
user turn. The model sees: the system prompt get_prompt_prefix() returns (task.system_prompt
when that is empty), then reset()'s observation as the user's message. A step's observation may
instead be a list of chat messages, appended as they are: an environment that runs the model's
tool calls itself returns their results as {"role": "tool", "name": ..., "content": ...} messages,
and lists the calls in info["tool_calls"] ({name, arguments, ok, error, seconds} each), which join
Sample.tool_calls like the agent loop's own calls (relay/envs/bfcl_multi_turn.py).

Rewards: the reward of each step lands in Sample.token_rewards at the last token of the model
turn that earned it (per-turn credit for token-level estimators) and in Sample.meta["env"]
["rewards"]; the final reward is the task's reward_fn (relay/envs/trajectory.py), by default
`episode_return` (the sum). The reward function gets the episode's own instance after its last
step: EnvRunner keeps a finished episode's instance until `finished(episode_id)` hands it over.

Optional class-level hooks, used by the built-in tasks:
    make_rows(n, seed) -> list[dict]                   task rows when no task.train_file is given
    warm_start_episodes(n, seed) -> list[ScriptedEpisode]  (relay.envs.chat) example episodes for the
                                                        tiny model's warm start

Outside-world failures are data: an environment that raises in reset or step ends its episode
with the error recorded (StepResult.error); the instance is never reused. The first few errors
are printed with their traceback, later ones only counted (the driver's env/errors metric).
"""

from __future__ import annotations

import traceback
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from relay.envs.contract import EnvMaker, row_seed
from relay.failures import print_failure

KEPT_FINISHED = 4096  # finished instances kept for the reward function before the oldest are reused


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
    observation: str | list[dict] = ""  # the user's next message, or chat messages ({"role": "tool", ...})
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

    def __init__(self, maker: EnvMaker | Callable[..., Environment]):
        self.maker = maker if isinstance(maker, EnvMaker) else EnvMaker(maker)
        self.live: dict[str, Environment] = {}
        # finished episodes' instances, for their reward function: id -> (instance, may be reused)
        self.ended: OrderedDict[str, tuple[Environment | None, bool]] = OrderedDict()
        self.free: list[Environment] = []  # instances to reset for another episode
        self.errors = 0

    def reset(self, episode_ids: list[str], rows: list[dict[str, Any]]) -> list[ResetResult]:
        out = []
        for eid, row in zip(episode_ids, rows, strict=True):
            if eid in self.live or eid in self.ended:
                raise ValueError(f"episode {eid!r} is already running")
            seed = row_seed(row)
            try:
                env = self.free.pop() if self.free else self.maker.new(seed)
                obs = self.maker.reset(env, row, seed)
                prefix = (env.get_prompt_prefix() or "") if hasattr(env, "get_prompt_prefix") else ""
            except Exception as e:
                out.append(ResetResult(error=self._report(_error("reset", e))))
                self._end(eid, None, reuse=False)
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
                obs = [dict(m) for m in obs] if isinstance(obs, list) else str(obs)  # messages, or text
                res = StepResult(obs, float(reward), bool(done), dict(info or {}))
            except Exception as e:
                self._end(eid, self.live.pop(eid), reuse=False)  # its state is unknown now: never reuse it
                out.append(StepResult(error=self._report(_error("step", e))))
                continue
            if res.done:
                self._end(eid, self.live.pop(eid))
            out.append(res)
        return out

    def close(self, episode_ids: list[str]) -> None:
        """Episodes the agent loop ended (limits, errors) are finished too."""
        for eid in episode_ids:
            if eid in self.live:
                self._end(eid, self.live.pop(eid))

    def finished(self, episode_id: str) -> tuple[Environment | None, bool]:
        """The episode's instance after its last step (None if it never started or was evicted),
        and whether it may serve another episode: hand it back with `recycle` once scored."""
        return self.ended.pop(episode_id, (None, False))

    def recycle(self, env: Environment | None, reuse: bool) -> None:
        if env is not None and reuse and self.maker.reusable:
            self.free.append(env)

    def _end(self, eid: str, env: Environment | None, reuse: bool = True) -> None:
        self.ended[eid] = (env, reuse)
        while len(self.ended) > KEPT_FINISHED:  # never scored (a rollout that was dropped): reuse the oldest
            _, old = self.ended.popitem(last=False)
            self.recycle(*old)

    def _report(self, error: str) -> str:
        self.errors += 1
        latest = error.splitlines()[0]
        print_failure(
            self.errors,
            f"EnvRunner: {error}",
            f"EnvRunner: {self.errors} environment errors so far; the latest: {latest}",
        )
        return error


def episode_return(sample, env=None) -> float:
    """Reward function: the sum of the environment's step rewards (0 for an episode that failed)."""
    return float(sum(sample.meta.get("env", {}).get("rewards", [])))
