"""ConfigStore: the config tree set attribute by attribute from Python, under the field names
users bring from other PPO setups, and under relay's own keys.

    config = ConfigStore()                        # the default run's config (configs/default.yaml)
    config = ConfigStore("ppo")                   # a shipped config by name, or a YAML file; {}: schema defaults
    config.model.model_name = "tiny"              # -> model.path
    config.training.learning_rate = 1e-5          # -> training.lr
    config.training.steps = 20                    # relay's own key, in the section of the same name
    config.rollout.n = 4                          # relay's sections: run, task, rollout, tools, algorithm, ...
    config.environment.max_turns = 3              # the environment's config (-> task.env_config)
    config.set("resources.rollout.count", 2)      # any key by its dotted path

There is one source of truth: a mapping of relay's keys, as a YAML file would hold them. A
field named as other PPO setups name it writes the relay key it stands for (FIELD_ALIASES below);
reading it reads that key back. `build()` turns the mapping into relay's typed, frozen Config with relay's own validation, so
mistakes are the same one-line problems `python driver.py` prints, all at once. A field relay
cannot honour is one of those lines too, naming the key to use.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from relay.config.load import config_from_mapping, read_config_file
from relay.config.schema import Config
from relay.envs.contract import EnvironmentConfig
from relay.run.recipes import recipe_path

# Fields whose relay key depends on other keys or on fit()'s arguments: kept as given, applied by build().
DEFERRED = {
    ("training", "num_epochs"),
    ("training", "batch_size"),
    ("checkpoint", "save_interval"),
    ("model", "device"),
    ("model", "tensor_parallel_size"),
    ("inference", "multi_turn"),
    ("ray", "use_ray"),
}


def _one(key: str, convert: Callable[[Any], Any] = lambda v: v) -> Callable[[Any], dict[str, Any]]:
    return lambda value: {key: convert(value)}


# Fields named as other PPO setups name them: (section, field) -> (the relay key a read reads,
# value -> {relay key: value})
FIELD_ALIASES: dict[tuple[str, str], tuple[str, Callable[[Any], dict[str, Any]]]] = {
    ("model", "model_name"): ("model.path", _one("model.path")),
    ("model", "local_path"): ("model.path", _one("model.path")),
    ("model", "dtype"): ("model.dtype", _one("model.dtype")),
    ("model", "trust_remote_code"): ("model.trust_remote_code", _one("model.trust_remote_code")),
    ("inference", "backend"): ("rollout.engine", _one("rollout.engine")),
    ("inference", "max_tokens"): ("rollout.max_new_tokens", _one("rollout.max_new_tokens")),
    ("inference", "temperature"): ("rollout.temperature", _one("rollout.temperature")),
    ("inference", "top_p"): ("rollout.top_p", _one("rollout.top_p")),
    ("inference", "max_turns"): ("rollout.max_turns", _one("rollout.max_turns")),
    ("training", "learning_rate"): ("training.lr", _one("training.lr")),
    ("training", "gamma"): ("algorithm.gamma", _one("algorithm.gamma")),
    ("training", "lam"): ("algorithm.lam", _one("algorithm.lam")),
    ("training", "clip_ratio"): ("algorithm.clip_low", lambda v: {"algorithm.clip_low": v, "algorithm.clip_high": v}),
    # GAE needs a value model: the critic comes with it
    ("training", "adv_estimator"): (
        "algorithm.estimator",
        lambda v: {"algorithm.estimator": v, **({"critic.enabled": True} if v == "gae" else {})},
    ),
    ("training", "use_kl_in_reward"): ("algorithm.kl_in", _one("algorithm.kl_in", lambda v: "reward" if v else "loss")),
    ("training", "kl_coef"): ("algorithm.kl_coef", _one("algorithm.kl_coef")),
    ("checkpoint", "output_dir"): ("run.output_dir", _one("run.output_dir", str)),
    ("ray", "num_actors"): ("resources.rollout.count", _one("resources.rollout.count")),
}

RELAY_SECTIONS = {f.name for f in dataclasses.fields(Config)}
ALIAS_SECTIONS = {section for section, _ in [*FIELD_ALIASES, *DEFERRED]}


def _fields_of(section: str) -> list[str]:
    return sorted({f for s, f in [*FIELD_ALIASES, *DEFERRED] if s == section})


def _schema_node(path: list[str]) -> Any:
    """The dataclass type (a section) or default value at `path` of relay's Config, or KeyError."""
    node: Any = Config
    for part in path:
        if not dataclasses.is_dataclass(node):
            raise KeyError(part)
        hints = typing.get_type_hints(node)
        if part not in hints:
            raise KeyError(part)
        field = next(f for f in dataclasses.fields(node) if f.name == part)
        if dataclasses.is_dataclass(hints[part]):
            node = hints[part]
        elif field.default is not dataclasses.MISSING:
            node = field.default
        else:
            node = field.default_factory()  # type: ignore[misc]
    return node


class Section:
    """One section (or nested section) of the store: attributes read and write relay keys."""

    def __init__(self, store: ConfigStore, path: tuple[str, ...]):
        object.__setattr__(self, "_store", store)
        object.__setattr__(self, "_path", path)

    def __setattr__(self, name: str, value: Any) -> None:
        self._store._set_field(self._path, name, value)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._store._get_field(self._path, name)

    def __repr__(self) -> str:
        return f"<ConfigStore section {'.'.join(self._path)}>"


class ConfigStore:
    """Relay's config, set from Python. See the module docstring."""

    def __init__(self, config: str | Path | Mapping[str, Any] | None = "default", overrides: list[str] = ()):
        """`config`: a shipped config's name or a YAML file (default: the one `python driver.py` runs
        without --config, so both start from the same run), or a mapping of sections."""
        raw: dict[str, Any] = {}
        if isinstance(config, Mapping):
            raw = _copy(config)
        elif config is not None:
            raw = read_config_file(recipe_path(str(config)))
        object.__setattr__(self, "_raw", raw)
        object.__setattr__(self, "_deferred", {})  # (section, field) -> value, applied by build()
        object.__setattr__(self, "_overrides", list(overrides))
        env_config = raw.get("task", {}).get("env_config") if isinstance(raw.get("task"), dict) else None
        object.__setattr__(self, "environment", EnvironmentConfig(env_config))

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: list[str] = ()) -> ConfigStore:
        """A config file, or a shipped config by name (`default`, `ppo`, ...)."""
        return cls(path, overrides)

    # ------------------------------------------------------------------ attribute access

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in RELAY_SECTIONS or name in ALIAS_SECTIONS:
            return Section(self, (name,))
        raise AttributeError(
            f"ConfigStore has no section {name!r} (sections: {', '.join(sorted(RELAY_SECTIONS | ALIAS_SECTIONS))})"
        )

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "environment":
            object.__setattr__(self, "environment", EnvironmentConfig(value))
            return
        raise AttributeError(f"set a key of a section (config.{name}.<key> = ...), not the section {name!r}")

    def set(self, key: str, value: Any) -> None:
        """Any key by its dotted path: relay's (`training.steps`) or an alias (`training.learning_rate`)."""
        *path, name = key.split(".")
        self._set_field(tuple(path), name, value)

    def get(self, key: str) -> Any:
        *path, name = key.split(".")
        return self._get_field(tuple(path), name)

    def _set_field(self, path: tuple[str, ...], name: str, value: Any) -> None:
        if len(path) == 1 and (path[0], name) in DEFERRED:
            self._deferred[(path[0], name)] = value
        elif len(path) == 1 and (path[0], name) in FIELD_ALIASES:
            for key, v in FIELD_ALIASES[(path[0], name)][1](value).items():
                self._write(key.split("."), v)
        elif path and path[0] not in RELAY_SECTIONS:
            # a section only aliases have (inference, ray) and a field it does not have: reported by build()
            self._deferred[(".".join(path), name)] = value
        else:
            self._write([*path, name], value)

    def _get_field(self, path: tuple[str, ...], name: str) -> Any:
        if len(path) == 1 and (path[0], name) in DEFERRED:
            return self._deferred.get((path[0], name))
        if len(path) == 1 and (path[0], name) in FIELD_ALIASES:
            return self._read(FIELD_ALIASES[(path[0], name)][0].split("."))
        if path and path[0] not in RELAY_SECTIONS:
            raise AttributeError(f"{'.'.join(path)}.{name}: not a field (fields: {', '.join(_fields_of(path[0]))})")
        try:
            node = _schema_node([*path, name])
        except KeyError:
            raise AttributeError(f"{'.'.join([*path, name])}: unknown key (relay/config/schema.py)") from None
        if isinstance(node, type) and dataclasses.is_dataclass(node):
            return Section(self, (*path, name))
        return self._read([*path, name])

    def _write(self, parts: list[str], value: Any) -> None:
        node = self._raw
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[parts[-1]] = value.to_dict() if isinstance(value, ConfigStore) else value

    def _read(self, parts: list[str]) -> Any:
        node: Any = self._raw
        for part in parts:
            if not isinstance(node, dict) or part not in node:
                return _schema_node(parts)  # not set: relay's default
            node = node[part]
        return node

    # ------------------------------------------------------------------ the typed tree

    def build(self, extra: Mapping[str, Any] | None = None) -> Config:
        """Relay's validated Config: the keys set here, the environment's config, then `extra`
        (dotted key -> value, set by the trainer). Raises ConfigError listing every problem."""
        store = ConfigStore(self._raw, self._overrides)
        object.__setattr__(store, "_deferred", dict(self._deferred))
        if self.environment:
            store._write(["task", "env_config"], dict(self.environment))
        problems = store._apply_deferred()
        for key, value in (extra or {}).items():
            store._write(key.split("."), value)
        return config_from_mapping(store._raw, store._overrides, problems)

    def _apply_deferred(self) -> list[str]:
        """Write the deferred fields' relay keys; the lines for what cannot be honoured."""
        problems = []
        d = self._deferred
        for section, name in d:
            if (section, name) not in DEFERRED:
                known = ", ".join(_fields_of(section)) or "none"
                problems.append(f"{section}.{name}: unknown key (fields of {section}: {known})")
        if (size := d.get(("training", "batch_size"))) is not None:
            n = self._read(["rollout", "n"])
            if isinstance(size, int) and size > 0 and size % n == 0:
                self._write(["training", "prompts_per_step"], size // n)
            else:
                problems.append(
                    f"training.batch_size: {size!r} samples per step must be a positive multiple of rollout.n={n} "
                    "(set training.prompts_per_step, the prompts per step, instead)"
                )
        device = d.get(("model", "device"))
        if device is not None and str(device) != "cpu":
            problems.append(
                f"model.device={device}: relay places each role itself; give roles GPUs with "
                "resources.learner.gpus and resources.rollout.gpus (e.g. 1)"
            )
        tp = d.get(("model", "tensor_parallel_size"))
        if tp not in (None, 1):
            engine = self._read(["rollout", "engine"])
            if engine in ("vllm", "sglang"):
                self._write(["rollout", "engine_kwargs", "tensor_parallel_size" if engine == "vllm" else "tp_size"], tp)
            else:
                problems.append(
                    f"model.tensor_parallel_size={tp}: the {engine} engine has no tensor parallelism; set "
                    "inference.backend (rollout.engine) to vllm or sglang, or shard the learner with "
                    "resources.learner.count"
                )
        if d.get(("inference", "multi_turn")) is False:
            self._write(["rollout", "max_turns"], 1)
        if d.get(("ray", "use_ray")) is False:
            problems.append(
                "ray.use_ray=false: relay's roles are always Ray actors (a local Ray starts by itself); "
                "resources.colocate=true runs the learner and the rollout worker in one actor"
            )
        return problems

    def checkpoint_every(self, iters_per_epoch: int) -> int | None:
        """checkpoint.save_interval (epochs) in steps, or None when it was not set."""
        interval = self._deferred.get(("checkpoint", "save_interval"))
        return None if interval is None else int(interval) * iters_per_epoch

    def to_dict(self) -> dict[str, Any]:
        """The relay keys set so far (what a YAML file would hold)."""
        return _copy(self._raw)

    def __repr__(self) -> str:
        return f"ConfigStore({self.to_dict()!r})"


def _copy(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Mappings copied all the way down; other values (user code objects included) as they are."""
    return {k: _copy(v) if isinstance(v, Mapping) else v for k, v in raw.items()}
