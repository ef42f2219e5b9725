"""What a reward function receives, and how it is called.

    def compute_reward(trajectory, environment):   # trajectory and environment
        return sum(trajectory.rewards)
    def my_reward(trajectory): ...                 # one argument: no environment
    def arithmetic_reward(sample, env): ...        # first parameter named `sample`: the Sample itself

`trajectory` is a Trajectory: the episode's states, actions, rewards and dones, plus text,
turns, tool_calls, ground_truth, finish_reason, and every Sample field by name (`sample` holds
the record itself). `environment` is the episode's own environment instance after its last step
(None for tasks without one, or when the instance is gone: the episode failed to start).

A reward must be a finite number. NaN, inf or anything that is not a number is a reward error:
counted, shown with its value, and never trained on (relay/envs/scoring.py).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from relay.config.user_code import RM_SCORE_PARAM, positional_params, wants_rm_score
from relay.types import Sample

SAMPLE_PARAM_NAMES = ("sample", "s")


@dataclass
class Trajectory:
    """One episode, step by step. For environment episodes states[i] is the observation
    the model saw before actions[i], which the environment answered with rewards[i] and dones[i];
    for episodes without an environment, actions are the model's turns and the other lists are empty."""

    states: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    dones: list[bool] = field(default_factory=list)
    infos: list[dict] = field(default_factory=list)
    text: str = ""  # the whole response (model turns and observations), decoded
    turns: int = 0  # model turns
    tool_calls: list[dict] = field(default_factory=list)
    ground_truth: Any = None
    finish_reason: str | None = None
    sample: Sample | None = None

    def __getattr__(self, name: str) -> Any:  # only for names the dataclass does not have
        sample = self.__dict__.get("sample")
        if sample is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(sample, name)

    @classmethod
    def from_sample(cls, sample: Sample) -> Trajectory:
        env = sample.meta.get("env")
        if env is None:
            return cls(
                actions=list(sample.turn_texts),
                text=sample.response_text,
                turns=len(sample.turn_spans),
                tool_calls=list(sample.tool_calls),
                ground_truth=sample.ground_truth,
                finish_reason=sample.finish_reason,
                sample=sample,
            )
        observations = [env.get("first_observation", ""), *env.get("observations", [])]
        actions = list(env.get("actions", []))
        return cls(
            states=observations[: len(actions)],
            actions=actions,
            rewards=list(env.get("rewards", [])),
            dones=list(env.get("dones", [])),
            infos=list(env.get("infos", [])),
            text=sample.response_text,
            turns=len(sample.turn_spans),
            tool_calls=list(sample.tool_calls),
            ground_truth=sample.ground_truth,
            finish_reason=sample.finish_reason,
            sample=sample,
        )

    def summary(self) -> dict[str, Any]:
        """Episode statistics: turns, environment steps and return, tool calls and errors, how it ended."""
        return {
            "turns": self.turns,
            "env_steps": len(self.actions) if self.rewards or self.dones else 0,
            "return": float(sum(self.rewards)),
            "tool_calls": sum(c.get("name") is not None for c in self.tool_calls),
            "tool_errors": sum(not c.get("ok", True) for c in self.tool_calls),
            "finish_reason": str(self.finish_reason) if self.finish_reason is not None else None,
        }


@dataclass
class RolloutData:
    """A batch of trajectories (one rollout), e.g. RolloutData.from_samples(samples)."""

    trajectories: list[Trajectory] = field(default_factory=list)

    @classmethod
    def from_samples(cls, samples: list[Sample]) -> RolloutData:
        return cls([Trajectory.from_sample(s) for s in samples])

    @property
    def returns(self) -> list[float]:
        """Each trajectory's summed environment reward."""
        return [float(sum(t.rewards)) for t in self.trajectories]

    def __len__(self) -> int:
        return len(self.trajectories)

    def __iter__(self):
        return iter(self.trajectories)

    def __getitem__(self, i: int) -> Trajectory:
        return self.trajectories[i]


def reward_caller(fn: Callable) -> Callable[[Sample, Any], Any]:
    """fn as a function of (sample, environment), whatever form the user wrote it in. One with an
    `rm_score` parameter gets sample.meta["rm_score"] (None where no reward model scored it)."""
    try:
        names, _, varargs = positional_params(fn)
    except (TypeError, ValueError):
        names, varargs = [], True
    wants_sample = bool(names) and names[0] in SAMPLE_PARAM_NAMES
    takes_env = varargs or len(names) >= 2
    rm_score = wants_rm_score(fn)

    def call(sample: Sample, environment: Any) -> Any:
        first = sample if wants_sample else Trajectory.from_sample(sample)
        extra = {RM_SCORE_PARAM: sample.meta.get(RM_SCORE_PARAM)} if rm_score else {}
        return fn(first, environment, **extra) if takes_env else fn(first, **extra)

    return call


def reward_value(raw: Any) -> tuple[float, str | None]:
    """(the reward, None) for a finite real number; (0.0, why) for anything else."""
    if isinstance(raw, numbers.Real) or (hasattr(raw, "item") and getattr(raw, "ndim", None) == 0):
        value = float(raw.item() if hasattr(raw, "item") else raw)
        if math.isfinite(value):
            return value, None
        return 0.0, f"reward is {value} (not finite)"
    shown = repr(raw)
    return 0.0, f"reward is {shown[:80]}{'...' if len(shown) > 80 else ''} ({type(raw).__name__}), not a number"
