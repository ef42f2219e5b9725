"""Hyperparameter sweeps with Ray Tune: each trial is one RL run (relay_trainer/loop.py: train).

    python tune.py configs/tune.yaml [key=value ...]      (tune.py: the thin entry over main here)
    relay tune configs/tune.yaml [key=value ...]
    ray job submit --working-dir . -- python tune.py configs/tune.yaml

The sweep file (configs/tune.yaml is the example):

    base: configs/default.yaml          # a relay config file, or a mapping of config sections
    overrides: [training.steps=30]      # dotted overrides on the base (the command line adds more)
    search:                             # any config key: grid, uniform, loguniform, choice, randint
      training.lr: {grid: [1.0e-4, 2.0e-4]}
      algorithm.clip_high: {uniform: [0.2, 0.3]}
    num_samples: 1                      # samples of the random keys, per grid point
    metric: reward/mean                 # any metric the driver logs
    mode: max
    scope: last                         # best trial by its last value (or avg, last-5-avg, all)
    scheduler: {type: asha, max_t: 30, grace_period: 10}   # or fifo; time unit: training steps
    max_concurrent_trials: null         # null: as many as the cluster's resources allow
    name: tiny-grpo-sweep
    output_dir: runs/tune

Every trial reserves one placement group: a bundle for its driver loop plus one per actor
(trial_bundles), and create_group puts the trial's actors in those bundles, so trials never
take each other's CPUs or GPUs. At the end: a results table, and the best trial's full config
as <output_dir>/<name>/best_config.yaml (run it with `python driver.py --config` that file).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from relay.config import Config, ConfigError, load_config, save_resolved

SEARCH_KINDS = {"grid": "list", "choice": "list", "uniform": "range", "loguniform": "range", "randint": "range"}
SCHEDULERS = ("asha", "fifo")
SCOPES = ("last", "avg", "last-5-avg", "last-10-avg", "all")
TRIAL_DRIVER_CPUS = 0.5  # the trial's own process runs the driver loop: light, mostly waiting on actors


@dataclass(frozen=True)
class Sweep:
    base: str | None  # a config file; None: defaults
    base_overrides: tuple[str, ...]  # the base mapping flattened, then `overrides`, then the command line
    search: dict[str, dict[str, Any]]
    num_samples: int = 1
    metric: str = "reward/mean"
    mode: str = "max"
    scope: str = "last"
    scheduler: dict[str, Any] | None = None
    max_concurrent_trials: int | None = None
    name: str = "sweep"
    output_dir: str = "runs/tune"
    base_config: Config = field(default=None, repr=False)  # the base, validated

    def trial_config(self, values: dict[str, Any]) -> Config:
        """The base with one trial's sampled values on top."""
        return load_config(self.base, [*self.base_overrides, *(f"{k}={json.dumps(v)}" for k, v in values.items())])


def _flatten(mapping: dict, prefix: str = "") -> list[str]:
    out = []
    for key, value in mapping.items():
        if isinstance(value, dict) and value:
            out += _flatten(value, f"{prefix}{key}.")
        else:
            out.append(f"{prefix}{key}={json.dumps(value)}")
    return out


def load_sweep(path: str | Path, overrides: list[str] = ()) -> Sweep:
    """Read and check a sweep file; every problem at once, before Ray starts (ConfigError)."""
    raw = yaml.safe_load(Path(path).read_text()) or {}
    problems: list[str] = []
    known = {
        "base",
        "overrides",
        "search",
        "num_samples",
        "metric",
        "mode",
        "scope",
        "scheduler",
        "max_concurrent_trials",
        "name",
        "output_dir",
    }
    problems += [f"{path}: unknown key {k!r} (valid: {', '.join(sorted(known))})" for k in raw if k not in known]
    base, base_overrides = raw.get("base"), []
    if isinstance(base, dict):
        base_overrides, base = _flatten(base), None
    elif base is not None and not isinstance(base, str):
        problems.append(f"base: a config file path or a mapping of config sections, got {base!r}")
        base = None
    if base is not None and not Path(base).exists():
        problems.append(f"base: config file not found: {base}")
    elif base is not None:
        base = str(Path(base).resolve())
    extra = raw.get("overrides") or []
    if not isinstance(extra, list) or not all(isinstance(o, str) for o in extra):
        problems.append(f"overrides: a list of key=value strings, got {extra!r}")
        extra = []
    base_overrides = (*base_overrides, *extra, *overrides)

    base_config = None
    try:
        base_config = load_config(base, list(base_overrides))
    except ConfigError as e:
        problems += e.problems

    search = raw.get("search") or {}
    if not isinstance(search, dict) or not search:
        problems.append("search: a mapping of config key -> {grid: [...]} / {uniform: [low, high]} / ...")
        search = {}
    for key, spec in search.items():
        kind = next(iter(spec), None) if isinstance(spec, dict) and len(spec) == 1 else None
        if kind not in SEARCH_KINDS:
            problems.append(f"search.{key}: one of {{{', '.join(f'{k}: ...' for k in SEARCH_KINDS)}}}, got {spec!r}")
            continue
        values = spec[kind]
        if SEARCH_KINDS[kind] == "list" and not (isinstance(values, list) and values):
            problems.append(f"search.{key}.{kind}: a non-empty list, got {values!r}")
        elif SEARCH_KINDS[kind] == "range" and not (
            isinstance(values, list)
            and len(values) == 2
            and all(isinstance(v, (int, float)) for v in values)
            and values[0] < values[1]
        ):
            problems.append(f"search.{key}.{kind}: [low, high] with low < high, got {values!r}")
        elif kind == "loguniform" and values[0] <= 0:
            problems.append(f"search.{key}.loguniform: low must be > 0, got {values[0]}")
        elif base_config is not None:  # every listed value, or both ends of a range, through the config loader
            for value in values:
                try:
                    load_config(base, [*base_overrides, f"{key}={json.dumps(value)}"])
                except ConfigError as e:
                    problems += [f"search.{key}={value!r}: {p}" for p in e.problems]
                    break

    metric, mode, scope = raw.get("metric", "reward/mean"), raw.get("mode", "max"), raw.get("scope", "last")
    if mode not in ("max", "min"):
        problems.append(f"mode: max or min, got {mode!r}")
    if scope not in SCOPES:
        problems.append(f"scope: one of {list(SCOPES)}, got {scope!r}")
    num_samples = raw.get("num_samples", 1)
    if not isinstance(num_samples, int) or num_samples < 1:
        problems.append(f"num_samples: an integer >= 1, got {num_samples!r}")
    scheduler = raw.get("scheduler")
    if scheduler is not None:
        if not isinstance(scheduler, dict) or scheduler.get("type", "asha") not in SCHEDULERS:
            problems.append(
                f"scheduler: {{type: asha, max_t: N, grace_period: M}} or {{type: fifo}} or null, got {scheduler!r}"
            )
        elif scheduler.get("type", "asha") == "asha":
            bad = set(scheduler) - {"type", "max_t", "grace_period", "reduction_factor"}
            if bad:
                problems.append(
                    f"scheduler: unknown asha keys {sorted(bad)} (valid: max_t, grace_period, reduction_factor)"
                )
            max_t = scheduler.get("max_t", base_config.training.steps if base_config else 1)
            grace = scheduler.get("grace_period", 1)
            if not (isinstance(max_t, int) and isinstance(grace, int) and 1 <= grace <= max_t):
                problems.append(
                    f"scheduler: need integers 1 <= grace_period <= max_t, got grace_period={grace!r} max_t={max_t!r}"
                )
    concurrent = raw.get("max_concurrent_trials")
    if concurrent is not None and (not isinstance(concurrent, int) or concurrent < 1):
        problems.append(f"max_concurrent_trials: an integer >= 1 or null, got {concurrent!r}")
    if problems:
        raise ConfigError(problems)
    return Sweep(
        base=base,
        base_overrides=tuple(base_overrides),
        search=search,
        num_samples=num_samples,
        metric=metric,
        mode=mode,
        scope=scope,
        scheduler=scheduler,
        max_concurrent_trials=concurrent,
        name=str(raw.get("name", Path(path).stem)),
        output_dir=str(raw.get("output_dir", "runs/tune")),
        base_config=base_config,
    )


def param_space(sweep: Sweep) -> dict[str, Any]:
    from ray import tune

    make = {
        "grid": tune.grid_search,
        "choice": tune.choice,
        "uniform": lambda v: tune.uniform(*v),
        "loguniform": lambda v: tune.loguniform(*v),
        "randint": lambda v: tune.randint(v[0], v[1] + 1),
    }  # inclusive
    return {key: make[kind](values) for key, spec in sweep.search.items() for kind, values in spec.items()}


def trial_bundles(cfg: Config) -> list[dict[str, float]]:
    """A trial's placement group: its own process (bundle 0), then one bundle per actor that
    relay_trainer.pools.actor_pools makes (actor_bundles: the same role rules). create_group claims
    them by shape, so the order does not matter; a missing one fails the trial with the shapes
    it looked for."""
    from relay_trainer.pools import actor_bundles

    return [{"CPU": TRIAL_DRIVER_CPUS}, *actor_bundles(cfg)]


def run_trial(values: dict[str, Any], sweep: Sweep) -> None:
    """Tune's function trainable: one relay run, each step reported to Tune."""
    from ray import tune

    from relay_trainer.loop import train

    ctx = tune.get_context()
    # Per-trial console bars would interleave in one log; run.name is the trial id, so actor
    # names (<run>/<role>-<i>) and run folders never collide between trials.
    cfg = load_config(
        sweep.base,
        [
            "logging.console=false",
            *sweep.base_overrides,
            *(f"{k}={json.dumps(v)}" for k, v in values.items()),
            f"run.output_dir={json.dumps(ctx.get_trial_dir())}",
            f"run.name={json.dumps(ctx.get_trial_id())}",
        ],
    )
    train(cfg, report=lambda step, metrics: tune.report({**metrics, "step": step}))


def _connect(sweep: Sweep, trial_cpus: float) -> None:
    import ray

    if ray.is_initialized():
        return
    address = sweep.base_config.resources.ray_address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, namespace="relay")
    else:  # a fresh local Ray big enough for one trial (phases do not overlap), as pools.connect's
        from relay_trainer import local_ray

        local_ray.start(trial_cpus, sweep.base_config.resources.dashboard)


def run_sweep(sweep: Sweep):
    """Run every trial; returns (ResultGrid, best Result, best relay Config)."""
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

    trial_cpus = max(sum(b.get("CPU", 0) for b in trial_bundles(sweep.trial_config(_first_values(sweep)))), 1)
    _connect(sweep, trial_cpus)
    s = sweep.scheduler or {"type": "fifo"}
    if s.get("type", "asha") == "asha":
        scheduler = ASHAScheduler(
            time_attr="training_iteration",
            max_t=s.get("max_t", sweep.base_config.training.steps),
            grace_period=s.get("grace_period", 1),
            reduction_factor=s.get("reduction_factor", 4),
        )
    else:
        scheduler = FIFOScheduler()
    trainable = tune.with_resources(
        tune.with_parameters(run_trial, sweep=sweep),
        resources=lambda values: tune.PlacementGroupFactory(trial_bundles(sweep.trial_config(values)), strategy="PACK"),
    )
    storage = Path(sweep.output_dir).resolve()
    # Trials keep the sweep's working directory (Tune would chdir into each trial's folder), so
    # relative paths in configs (task.train_file, model.path) mean the same as in a plain run.
    os.environ.setdefault("RAY_CHDIR_TO_TRIAL_DIR", "0")
    tuner = tune.Tuner(
        trainable,
        param_space=param_space(sweep),
        tune_config=tune.TuneConfig(
            metric=sweep.metric,
            mode=sweep.mode,
            scheduler=scheduler,
            num_samples=sweep.num_samples,
            max_concurrent_trials=sweep.max_concurrent_trials,
            reuse_actors=False,
        ),
        run_config=tune.RunConfig(name=sweep.name, storage_path=str(storage), verbose=1),
    )
    results = tuner.fit()
    if all(r.metrics is None or sweep.metric not in r.metrics for r in results):
        return results, None, None  # every trial failed before its first report
    best = results.get_best_result(metric=sweep.metric, mode=sweep.mode, scope=sweep.scope)
    best_cfg = sweep.trial_config({k: best.config[k] for k in sweep.search})
    save_resolved(best_cfg, storage / sweep.name / "best_config.yaml")
    return results, best, best_cfg


def _first_values(sweep: Sweep) -> dict[str, Any]:
    """One valid value per searched key (the first listed, or the low end of a range)."""
    return {key: values[0] for key, spec in sweep.search.items() for values in spec.values()}


def print_table(sweep: Sweep, results, best) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"sweep {sweep.name}: {sweep.metric} ({sweep.mode}, best by {sweep.scope})")
    table.add_column("trial")
    for key in sweep.search:
        table.add_column(key, justify="right")
    table.add_column("steps", justify="right")
    table.add_column(f"{sweep.metric} last", justify="right")
    table.add_column(f"{sweep.metric} best", justify="right")
    table.add_column("status")
    for result in results:
        history = result.metrics_dataframe
        values = history[sweep.metric] if history is not None and sweep.metric in history else []
        last = f"{values.iloc[-1]:.4g}" if len(values) else "-"
        peak = f"{(values.max() if sweep.mode == 'max' else values.min()):.4g}" if len(values) else "-"
        trial_id = (result.metrics or {}).get("trial_id", Path(result.path).name)
        mark = " *" if best is not None and result.path == best.path else ""
        table.add_row(
            f"{trial_id}{mark}",
            *(_short(result.config.get(k)) for k in sweep.search),
            str((result.metrics or {}).get("training_iteration", 0)),
            last,
            peak,
            "error" if result.error else "done",
        )
    Console().print(table)


def _short(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="relay tune", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("sweep", help="sweep YAML, e.g. configs/tune.yaml")
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides on the sweep's base config")
    args = parser.parse_args(argv)
    try:
        sweep = load_sweep(args.sweep, args.overrides)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 2
    results, best, best_cfg = run_sweep(sweep)
    print_table(sweep, results, best)
    if best is None:
        print(f"no trial reported {sweep.metric}; see the errors above", file=sys.stderr)
        return 1
    best_file = Path(sweep.output_dir).resolve() / sweep.name / "best_config.yaml"
    print(
        f"best trial: {', '.join(f'{k}={_short(best.config[k])}' for k in sweep.search)} "
        f"({sweep.metric} {best.metrics.get(sweep.metric)}); its config: {best_file}"
    )
    return 1 if results.errors else 0


if __name__ == "__main__":
    sys.exit(main())
