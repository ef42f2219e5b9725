"""The environment contract users bring, called the way they wrote it.

    class MyEnv:                                  # no relay import needed; BaseEnvironment is optional
        def __init__(self, config): ...           # or (self), or (self, config, seed=None)
        def reset(self) -> str: ...               # or reset(self, seed=None), or reset(self, **row)
        def step(self, action): return obs, reward, done, info
        def get_state_description(self) -> str: ...
        def get_prompt_prefix(self) -> str: ...   # the system prompt ("" for none)

EnvMaker builds instances and starts episodes by inspecting those signatures once:
- the constructor gets `task.env_config` (a mapping with attribute access: `config.max_turns`)
  when it takes a first argument, and `seed=` when it accepts one;
- reset gets the row's keys it accepts (all of them with **kwargs), and `seed=` when it accepts one.
Every episode has a seed, shared by the rollout.n episodes of one group (a GRPO group compares
attempts at one problem). When neither the constructor nor reset takes it, Python's and numpy's
global RNGs are seeded with it right before reset(), which is where an environment that calls
`random` in reset() draws its setup.
"""

from __future__ import annotations

import inspect
import json
import random
import zlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np


class EnvConfig(dict):
    """`task.env_config`: a plain dict that also reads as attributes, nested mappings too."""

    def __init__(self, data: Mapping[str, Any] | None = None):
        super().__init__({k: EnvConfig(v) if isinstance(v, Mapping) else v for k, v in (data or {}).items()})

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"task.env_config has no key {name!r} (keys: {sorted(self)})") from None


class EnvironmentConfig(EnvConfig):
    """An environment's config written from Python: EnvironmentConfig(max_turns=3), or set field by
    field (`config.environment.max_turns = 3`); relay passes it to the constructor as task.env_config."""

    def __init__(self, data: Mapping[str, Any] | None = None, **fields: Any):
        super().__init__({**(data or {}), **fields})

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def __delattr__(self, name: str) -> None:
        del self[name]


class BaseEnvironment:
    """Optional base class: the four methods of the contract. Nothing requires it."""

    def __init__(self, config: Mapping[str, Any] | None = None):
        self.config = config if isinstance(config, EnvConfig) else EnvConfig(config)
        self._done = False

    def reset(self) -> str:
        raise NotImplementedError(f"{type(self).__name__}.reset() -> the first observation")

    def step(self, action: str) -> tuple[str, float, bool, dict]:
        raise NotImplementedError(f"{type(self).__name__}.step(action) -> (observation, reward, done, info)")

    def get_state_description(self) -> str:
        return ""

    def get_prompt_prefix(self) -> str:
        return ""


def _params(fn: Callable) -> tuple[list[str], bool]:
    """Names of the parameters a call can pass by keyword (self excluded), and whether **kwargs is there."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return [], True
    names = [
        p.name
        for p in sig.parameters.values()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"
    ]
    return names, any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())


def row_seed(row: Mapping[str, Any]) -> int:
    """A row's episode seed: its own `seed` key (rows made without a rows file), else a hash of the row."""
    if isinstance(row.get("seed"), int):
        return row["seed"]
    return zlib.crc32(json.dumps(row, sort_keys=True, default=str).encode())


class EnvMaker:
    """Builds instances of one environment class and starts episodes on them, by the class's signatures."""

    def __init__(self, cls: Callable[..., Any], env_config: Mapping[str, Any] | None = None):
        self.cls, self.config = cls, EnvConfig(env_config)
        init_names, init_kwargs = _params(cls)
        self.init_takes_config = bool(init_names and init_names[0] != "seed") or (init_kwargs and not init_names)
        self.init_takes_seed = "seed" in init_names
        self.reset_names, self.reset_kwargs = _params(getattr(cls, "reset", lambda: None))
        self.reset_takes_seed = "seed" in self.reset_names

    @property
    def reusable(self) -> bool:
        """Instances can serve several episodes unless the constructor is where an episode is seeded."""
        return not self.init_takes_seed

    def new(self, seed: int | None = None) -> Any:
        args = (self.config,) if self.init_takes_config else ()
        return self.cls(*args, seed=seed) if self.init_takes_seed else self.cls(*args)

    def reset(self, env: Any, row: Mapping[str, Any], seed: int) -> Any:
        """The first observation: reset with the row's keys it accepts, the seed where it takes one."""
        kwargs = dict(row) if self.reset_kwargs else {k: v for k, v in row.items() if k in self.reset_names}
        if self.reset_takes_seed:
            kwargs["seed"] = seed
        elif not self.init_takes_seed:  # the environment draws its setup from the global RNGs
            random.seed(seed)
            np.random.seed(seed % 2**32)
        return env.reset(**kwargs)


def seed_rows(n: int, seed: int) -> list[dict[str, int]]:
    """Rows for an environment task without a rows file: one episode seed each."""
    rng = random.Random(seed)
    return [{"seed": rng.randrange(2**31)} for _ in range(n)]
