"""YAML + `a.b=value` overrides -> a typed Config, every problem listed at once with its key path;
and the resolved config written back as YAML."""

from __future__ import annotations

import collections.abc
import dataclasses
import difflib
import types
import typing
from pathlib import Path
from typing import Any, Literal

import yaml

from relay.config.bfcl import with_bfcl_env
from relay.config.model import with_cpu_attention
from relay.config.schema import Config, ConfigError
from relay.config.textarena import with_game_env
from relay.config.validate import validate
from relay.config.validate_pipeline import with_layout


def load_config(path: str | Path | None = None, overrides: list[str] = ()) -> Config:
    """YAML file (optional) + `a.b=value` overrides -> validated Config, or ConfigError."""
    raw: dict[str, Any] = {}
    if path is not None:
        raw = _read_yaml(Path(path))
    return config_from_mapping(raw, overrides)


def read_config_file(path: str | Path) -> dict[str, Any]:
    """A config file's sections as a mapping, or one ConfigError line naming the file."""
    return _read_yaml(Path(path))


def config_from_mapping(raw: dict[str, Any], overrides: list[str] = (), problems: list[str] = ()) -> Config:
    """Sections as a mapping (what a YAML file holds; values may be objects) + `a.b=value` overrides
    -> validated Config, or ConfigError listing `problems` found before and every one found here."""
    raw, problems = _copy_sections(raw), list(problems)
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            problems.append(f"override {item!r}: expected key.path=value")
            continue
        node = raw
        parts = key.strip().split(".")
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[parts[-1]] = yaml.safe_load(value) if value.strip() else None
    cfg = _build(Config, raw, "", problems)
    # task.name=textarena: its game as task.env (a frozen_policy opponent: model.* and rollout.* too)
    cfg = dataclasses.replace(cfg, task=with_game_env(cfg.task, cfg.model, cfg.rollout))
    cfg = dataclasses.replace(cfg, task=with_bfcl_env(cfg.task))  # task.name=bfcl, multi-turn: its environment
    # Validate the best-effort tree too (bad values were replaced by defaults), skipping keys
    # that already have a problem, so one run lists everything.
    bad_keys = {problem.split(":")[0] for problem in problems}
    problems += [problem for problem in validate(cfg) if problem.split(":")[0] not in bad_keys]
    if problems:
        raise ConfigError(problems)
    return with_cpu_attention(with_layout(cfg))


def _copy_sections(raw: dict[str, Any]) -> dict[str, Any]:
    """The mappings copied (overrides write into them), the values as they are (objects stay the same object)."""
    return {k: _copy_sections(v) if isinstance(v, dict) else v for k, v in raw.items()}


def _read_yaml(path: Path) -> dict[str, Any]:
    """The file's mapping, or one ConfigError line naming the file (and the 1-based line of a syntax error)."""
    if not path.exists():
        raise ConfigError([f"config file not found: {path}"])
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError([f"{path}: cannot read the config file ({e})"]) from None
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        context = getattr(e, "context", None)
        raise ConfigError([f"{where}: YAML syntax error: {problem}" + (f" ({context})" if context else "")]) from None
    if loaded is None:  # an empty file would silently train the default task
        raise ConfigError([f"{path}: the config file is empty (leave out --config to run the defaults)"])
    if not isinstance(loaded, dict):
        raise ConfigError([f"{path}: top level must be a mapping of sections"])
    return loaded


def save_resolved(cfg: Config, path: Path) -> None:
    path.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))


def _build(cls, data: Any, prefix: str, problems: list[str]):
    if not isinstance(data, dict):
        problems.append(f"{prefix.rstrip('.') or '<root>'}: expected a mapping, got {type(data).__name__}")
        return cls()
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            problems.append(
                f"{path}: unknown key"
                + (f" (did you mean {prefix}{close[0]}?)" if close else f" (valid: {', '.join(names)})")
            )
            continue
        kwargs[key] = _coerce(hints[key], value, path, problems)
    try:
        return cls(**kwargs)
    except TypeError as e:  # only reachable through a bad nested default
        problems.append(f"{prefix or '<root>'}: {e}")
        return cls()


def _is_callable_type(tp) -> bool:
    return tp is collections.abc.Callable or typing.get_origin(tp) is collections.abc.Callable


def _coerce(tp, value, path: str, problems: list[str]):
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, path + ".", problems)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if callable(value) and not isinstance(value, str) and any(_is_callable_type(a) for a in inner):
            return value  # user code given from Python as the object itself (task.env, task.reward_fn)
        if isinstance(value, dict) and (shapes := [a for a in inner if dataclasses.is_dataclass(a)]):
            return _coerce(shapes[0], value, path, problems)  # a number or a mapping: resources.rollout.count
        return _coerce(inner[0], value, path, problems)
    if origin is Literal:
        if value not in args:
            close = difflib.get_close_matches(str(value), [str(a) for a in args], n=1)
            problems.append(
                f"{path}: {value!r} is not one of {list(args)}" + (f" (did you mean {close[0]!r}?)" if close else "")
            )
            return args[0]
        return value
    if origin is tuple:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, (list, tuple)):
            problems.append(f"{path}: expected a list, got {type(value).__name__}")
            return ()
        return tuple(_coerce(args[0], v, f"{path}[{i}]", problems) for i, v in enumerate(value))
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            problems.append(f"{path}: expected a mapping, got {type(value).__name__}")
            return {}
        return dict(value)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            problems.append(f"{path}: expected a number, got {value!r}")
            return 0.0
        try:
            return float(value)  # YAML 1.1 reads "1e-5" as a string
        except ValueError:
            problems.append(f"{path}: expected a number, got {value!r}")
            return 0.0
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            problems.append(f"{path}: expected an integer, got {value!r}")
            return 0
        return value
    if tp is bool:
        if not isinstance(value, bool):
            problems.append(f"{path}: expected true or false, got {value!r}")
            return False
        return value
    if tp is str:
        if not isinstance(value, str):
            problems.append(f"{path}: expected a string, got {value!r}")
            return ""
        return value
    return value
