"""What `algorithm.*` chooses among, and each choice's hyperparameters: found, bound to a config
and checked without torch, so the driver validates a config before any actor (or torch) starts.

A policy loss is a module of relay/algos/policy_losses/, an advantage estimator a module of
relay/algos/estimators/. The module's name is the config value (algorithm.policy_loss,
algorithm.estimator); pkgutil finds the modules, so no list of names is kept anywhere else.
Each module is torch-free when imported (its math imports torch inside its function) and holds:

    Hyperparameters   a frozen dataclass: each hyperparameter with its default and a comment;
                      problems() -> {field: what is wrong with its value}, the checks
    per_token_loss    (policy losses) the math: relay/algos/policy_losses/__init__.py
    advantages        (estimators) the math: relay/algos/estimators/__init__.py
    TRAITS            (estimators) EstimatorTraits, what the rest of the run must provide

Binding a config to Hyperparameters, the way torchtune's config/_validate.py binds a config to a
component's signature (here: to the dataclass's fields, by name). A field named like an
`algorithm.*` key is read from that key: those are the settings several entries share, each with
its own key (clip_low, clip_high, dual_clip_c, gamma, lam). Any other field is read
from algorithm.policy_loss_args / algorithm.estimator_args, else keeps its default.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import pkgutil
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

# The reductions of a [B,R] per-token loss that algorithm.loss_agg names (relay/algos/losses.py aggregate).
AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


@dataclass(frozen=True)
class EstimatorTraits:
    """What an estimator needs from the rest of the run: validation and the batch read these."""

    uses_values: bool = False  # the critic's values [B,R]: needs critic.enabled
    token_level: bool = False  # adds token_rewards itself (per-turn rewards, a KL penalty in the reward)
    needs_groups: bool = False  # a group baseline: with rollout.n = 1 every advantage would be 0


class Registry(Mapping[str, types.ModuleType]):
    """name -> module, for the modules of one subpackage; `kind` names an entry in messages."""

    def __init__(self, package: str, kind: str, name_field: str, args_field: str):
        self.package, self.kind = package, kind
        self.name_field, self.args_field = name_field, args_field  # e.g. policy_loss, policy_loss_args
        self._modules: dict[str, types.ModuleType] | None = None

    def _found(self) -> dict[str, types.ModuleType]:
        if self._modules is None:  # on first use, not at import: a module may import this one
            package = importlib.import_module(self.package)
            names = sorted(m.name for m in pkgutil.iter_modules(package.__path__) if not m.name.startswith("_"))
            self._modules = {name: importlib.import_module(f"{self.package}.{name}") for name in names}
        return self._modules

    def __getitem__(self, name: str) -> types.ModuleType:
        return self._found()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._found())

    def __len__(self) -> int:
        return len(self._found())

    def module(self, name: str) -> types.ModuleType:
        """The entry called `name`, or a ValueError that names the choices."""
        if name not in self:
            raise ValueError(f"unknown {self.kind} {name!r}; choose one of {sorted(self)}")
        return self[name]

    def hyperparameter_names(self) -> set[str]:
        """Every hyperparameter of every entry."""
        return {f.name for module in self.values() for f in dataclasses.fields(module.Hyperparameters)}

    def from_keywords(self, name: str, keywords: dict[str, Any]) -> Any:
        """Hyperparameters of entry `name` from keyword arguments (library calls). A keyword that only
        other entries take is ignored, so one call can carry the settings of all of them, as a config
        does; one that no entry takes is a TypeError, and a bad value a ValueError."""
        module = self.module(name)
        own = {f.name for f in dataclasses.fields(module.Hyperparameters)}
        unknown = sorted(set(keywords) - self.hyperparameter_names())
        if unknown:
            raise TypeError(f"no {self.kind} takes {unknown}; {name} takes {sorted(own)}")
        hyperparameters = module.Hyperparameters(**{k: v for k, v in keywords.items() if k in own})
        bad = hyperparameters.problems()
        if bad:
            raise ValueError(f"{self.kind} {name}: " + "; ".join(f"{f}: {m}" for f, m in bad.items()))
        return hyperparameters

    def bind(self, settings) -> Any:
        """The chosen entry's Hyperparameters from the algorithm config (see the module docstring);
        a ValueError lists what is wrong (validation reports the same, earlier, per key)."""
        name = getattr(settings, self.name_field)
        hyperparameters, problems = self._bind(name, settings, getattr(settings, self.args_field))
        if problems:
            raise ValueError("; ".join(f"{key}: {message}" for key, message in problems.items()))
        return hyperparameters

    def problems(self, settings) -> list[str]:
        """Each problem of the choice and its hyperparameters in the algorithm config, one line
        naming its key."""
        name, args = getattr(settings, self.name_field), getattr(settings, self.args_field)
        if name in self:
            _, problems = self._bind(name, settings, args)
        else:
            close = difflib.get_close_matches(str(name), list(self), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems = {f"algorithm.{self.name_field}": f"{name!r} is not one of {sorted(self)}{hint}"}
        # A shared key must suit every entry that reads it, not only the chosen one: a valid config
        # stays valid when only algorithm.<name_field> changes.
        for other in self:
            for key, message in self._bind(other, settings, {})[1].items():
                problems.setdefault(key, message)
        return [f"{key}: {message}" for key, message in problems.items()]

    def _bind(self, name: str, settings, args: dict[str, Any]) -> tuple[Any, dict[str, str]]:
        """(Hyperparameters, {config key: problem}) of entry `name`; bad values fall back to defaults."""
        cls = self[name].Hyperparameters
        types_by_field = typing.get_type_hints(cls)
        shared = {f.name for f in dataclasses.fields(settings)} & set(types_by_field)
        values = {field: getattr(settings, field) for field in shared}
        problems: dict[str, str] = {}
        for field, raw in args.items():
            key = f"algorithm.{self.args_field}.{field}"
            if field in shared:
                problems[key] = f"set algorithm.{field} instead (it has its own key)"
            elif field not in types_by_field:
                close = difflib.get_close_matches(str(field), list(types_by_field), n=1)
                hint = f"did you mean {close[0]}?" if close else f"{name} takes {sorted(types_by_field) or 'none'}"
                problems[key] = f"not a hyperparameter of {self.kind} {name} ({hint})"
            else:
                value, error = _coerce(types_by_field[field], raw)
                if error is None:
                    values[field] = value
                else:
                    problems[key] = error
        hyperparameters = cls(**values)
        for field, message in hyperparameters.problems().items():
            key = f"algorithm.{field}" if field in shared else f"algorithm.{self.args_field}.{field}"
            problems.setdefault(key, message)
        return hyperparameters, problems


def _coerce(tp, value) -> tuple[Any, str | None]:
    """A YAML value as the field's type: (value, None), or (None, what is wrong)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        if value is None and type(None) in typing.get_args(tp):
            return None, None
        tp = next(a for a in typing.get_args(tp) if a is not type(None))
    if tp is float and not isinstance(value, bool) and isinstance(value, (int, float, str)):
        try:
            return float(value), None  # YAML 1.1 reads "1e-5" as a string
        except ValueError:
            pass
    elif tp is int and isinstance(value, int) and not isinstance(value, bool):
        return value, None
    elif tp in (bool, str) and isinstance(value, tp):
        return value, None
    expected = {float: "a number", int: "an integer", bool: "true or false", str: "a string"}.get(tp, str(tp))
    return None, f"expected {expected}, got {value!r}"


POLICY_LOSSES = Registry("relay.algos.policy_losses", "policy loss", "policy_loss", "policy_loss_args")
ESTIMATORS = Registry("relay.algos.estimators", "advantage estimator", "estimator", "estimator_args")
