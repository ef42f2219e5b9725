"""task.name=reasoning_gym: which of reasoning-gym's procedural generators make the rows
(relay/envs/reasoning_gym.py), and the checks that name a bad one in one line before any actor starts.

One generator: `task.dataset: NAME` with its arguments in `task.dataset_args: {...}`. A weighted mix:
`task.datasets: {NAME: weight, ...}`, where a dataset that takes arguments is given as
`NAME: {weight: w, args: {...}}` (`task.datasets.NAME.args.ARG=...` on the command line).
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field
from typing import Any

PACKAGE_PIN = "reasoning-gym==0.1.25"
INSTALL = f"pip install '{PACKAGE_PIN}' (or pip install -e '.[tasks]')"
RELAY_ARGS = ("seed", "size")  # relay sets them: run.seed, task.num_train_rows, task.num_eval_rows


@dataclass(frozen=True)
class ReasoningGymFields:
    """TaskConfig's fields for task.name=reasoning_gym."""

    dataset: str | None = None  # one generator, e.g. basic_arithmetic
    dataset_args: dict[str, Any] = field(default_factory=dict)  # its arguments, e.g. {min_terms: 2}
    datasets: dict[str, Any] = field(default_factory=dict)  # a mix: {NAME: weight | {weight: w, args: {...}}}
    # false: a reply earns 1.0 only when the verifier scores it right, else 0.0; true: the verifier's
    # own score, partial credit included (most give the answer's share of a reply that contains it).
    partial_credit: bool = True
    # Worked examples: the first few_shot training rows of each dataset, asked and answered between
    # the answer tags, as chat turns before every row's question (the same ones for all its rows).
    few_shot: int = 0


def mix(task) -> dict[str, tuple[float, dict[str, Any]]]:
    """{dataset: (weight, generator arguments)}, for one dataset or a mix alike (a valid config)."""
    if task.dataset is not None:
        return {task.dataset: (1.0, dict(task.dataset_args))}
    out = {}
    for name, entry in task.datasets.items():
        weight, args = (entry.get("weight", 1.0), entry.get("args") or {}) if isinstance(entry, dict) else (entry, {})
        out[name] = (float(weight), dict(args))
    return out


def validate_reasoning_gym(task) -> list[str]:
    if task.name != "reasoning_gym":
        given = [k for k in ("dataset", "dataset_args", "datasets") if getattr(task, k)]
        if not task.partial_credit:
            given.append("partial_credit")
        if task.few_shot:
            given.append("few_shot")
        return [f"task.{k}: only task.name=reasoning_gym reads it, not {task.name!r}" for k in given]
    if task.dataset is None and not task.datasets:
        return ["task.dataset: task.name=reasoning_gym needs task.dataset (one generator) or task.datasets (a mix)"]
    if task.dataset is not None and task.datasets:
        return ["task.datasets: give task.dataset or task.datasets, not both"]
    if task.datasets and task.dataset_args:
        return ["task.dataset_args: with task.datasets, each dataset's arguments go in task.datasets.NAME.args"]
    if task.few_shot < 0:  # its type is checked with every field's
        return [f"task.few_shot: the number of worked examples must be an integer >= 0, got {task.few_shot!r}"]
    try:
        from reasoning_gym.factory import DATASETS
    except ImportError:
        return [f"task.name: reasoning_gym needs the reasoning-gym package: {INSTALL}"]
    p: list[str] = []
    if task.dataset is not None:
        return _check_dataset(DATASETS, task.dataset, task.dataset_args, "task.dataset", "task.dataset_args")
    for name, entry in task.datasets.items():
        key = f"task.datasets.{name}"
        if isinstance(entry, dict):
            if extra := sorted(set(entry) - {"weight", "args"}):
                p.append(f"{key}: unknown key {extra[0]!r} (a dataset of a mix takes weight and args)")
                continue
            weight, args = entry.get("weight", 1.0), entry.get("args") or {}
        else:
            weight, args = entry, {}
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0:
            p.append(f"{key}: the weight must be a number > 0, got {weight!r}")
        p += _check_dataset(DATASETS, name, args, key, f"{key}.args")
    return p


def _check_dataset(registry: dict, name: str, args: Any, key: str, args_key: str) -> list[str]:
    """One line for an unknown name (the closest ones), or for arguments the generator refuses."""
    if name not in registry:
        close = difflib.get_close_matches(str(name), registry, n=3, cutoff=0.5)
        hint = f"closest: {', '.join(close)}" if close else f"{len(registry)} in reasoning_gym.factory.DATASETS"
        return [f"{key}: {name!r} is not a reasoning-gym dataset ({hint})"]
    if not isinstance(args, dict):
        return [f"{args_key}: expected a mapping of {name}'s arguments, got {args!r}"]
    config_cls = registry[name][1]
    takes = [f.name for f in dataclasses.fields(config_cls) if f.name not in RELAY_ARGS]
    if own := [a for a in args if a in RELAY_ARGS]:
        return [f"{args_key}: {own[0]} is relay's to set (run.seed, task.num_train_rows, task.num_eval_rows)"]
    if unknown := [a for a in args if a not in takes]:
        return [f"{args_key}: {name} takes no argument {unknown[0]!r} (it takes: {', '.join(takes)})"]
    try:
        config = config_cls(**args, seed=0, size=1)
        if hasattr(config, "validate"):
            config.validate()
    except Exception as e:  # the package's own check: its message, on one line
        message = " ".join(str(e).split()) or type(e).__name__
        return [f"{args_key}: {name}: {message}"]
    return []
