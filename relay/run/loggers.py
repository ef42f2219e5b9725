"""Metric loggers, chosen by config: console, JSONL, TensorBoard, Weights & Biases, MLflow.

The driver builds one `MultiLogger` with `make_loggers(...)` and calls `log(metrics, step)` once
per training step and `close()` at the end. Every backend sees the same flat dict of floats,
keyed by slash-separated names ("reward/mean", "kl/mean", ...).

`step` counts finished training steps from 1 (a resumed run continues the count), so the
console bar reads "step/total".

TensorBoard, W&B and MLflow are optional: they are imported only when enabled. The settings are
`LoggingConfig` (logging.* of the config tree); relay.config.validate_logging checks before any
actor starts that each enabled logger's package is installed and that wandb_mode is known, so a
missing package fails with the pip extra to install (`relay[loggers]`), not after the models load.

Keys the console shows when present (anything else still reaches every file backend):
"reward/mean", "kl/mean", "rollout/tokens_per_s", "time/step_s".
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from relay.config import LOGGERS_EXTRA, LoggingConfig
from relay.run.console import CONSOLE_FIELDS, ConsoleLogger, format_line


@runtime_checkable
class Logger(Protocol):
    def log(self, metrics: dict[str, float], step: int) -> None: ...

    def close(self) -> None: ...


class MissingLoggerDependency(ImportError):
    """An enabled logger's package is not installed."""


def _require(module: str, what: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingLoggerDependency(
            f"{what} logging is enabled but `{module}` cannot be imported ({e}). "
            f"Install the extra: pip install '{LOGGERS_EXTRA}' (or turn {what} logging off)."
        ) from e


def _as_floats(metrics: dict[str, Any]) -> dict[str, float]:
    out = {}
    for key, value in metrics.items():
        try:
            out[key] = float(value)  # ints, bools, numpy scalars, 0-d tensors
        except (TypeError, ValueError) as e:
            raise TypeError(f"metric {key!r} is not a number: {value!r}") from e
    return out


# ---------------------------------------------------------------------------------------------
# Files


class JsonlLogger:
    """run_dir/metrics.jsonl: one JSON object per step with "step" and wall-clock "time".

    Appends, so a resumed run continues the same file (readers keep the last record of a step).
    Each line is flushed so a crash loses at most the line being written. Non-finite values are
    written as null, keeping the file strict JSON (`jq`, browsers).
    """

    filename = "metrics.jsonl"

    def __init__(self, run_dir: str | Path, filename: str | None = None):
        self.path = Path(run_dir) / (filename or self.filename)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "a", encoding="utf-8")

    def log(self, metrics: dict[str, float], step: int) -> None:
        record: dict[str, Any] = {"step": int(step), "time": time.time()}
        for key, value in metrics.items():
            record[key] = value if math.isfinite(value) else None
        self._f.write(json.dumps(record, allow_nan=False) + "\n")
        self._f.flush()

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()


class TensorBoardLogger:
    """Event files in run_dir/tensorboard (`tensorboard --logdir runs/`)."""

    def __init__(self, run_dir: str | Path, config_dict: dict | None = None):
        _require("tensorboard", "TensorBoard")
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:  # torch raises this when tensorboard is missing or too old
            raise MissingLoggerDependency(
                f"TensorBoard logging needs `tensorboard` ({e}); pip install '{LOGGERS_EXTRA}'"
            ) from e

        self.log_dir = Path(run_dir) / "tensorboard"
        self._writer = SummaryWriter(log_dir=str(self.log_dir), flush_secs=30)
        if config_dict:
            # Text summaries are markdown: a code block keeps the config readable.
            self._writer.add_text("config", "```\n" + json.dumps(config_dict, indent=2) + "\n```", 0)

    def log(self, metrics: dict[str, float], step: int) -> None:
        for key, value in metrics.items():
            self._writer.add_scalar(key, value, global_step=step)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class WandbLogger:
    """A Weights & Biases run under run_dir/wandb; offline unless the config says otherwise."""

    def __init__(self, run_dir: str | Path, run_name: str, project: str, mode: str, config_dict: dict | None = None):
        wandb = _require("wandb", "Weights & Biases")
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        self._run = wandb.init(project=project, name=run_name, mode=mode, dir=str(run_dir), config=config_dict or {})

    def log(self, metrics: dict[str, float], step: int) -> None:
        self._run.log(metrics, step=step)

    def close(self) -> None:
        if self._run is not None:
            self._run.finish()
            self._run = None


_MLFLOW_BAD_CHARS = re.compile(r"[^/\w.\- :]")


class MLflowLogger:
    """An MLflow run: flattened config as params, every step's metrics.

    Default store: `sqlite:///<run_dir>/mlflow.db`, not MLflow's older `file:<run_dir>/mlruns`:
    MLflow 3.x refuses the file store ("maintenance mode") unless MLFLOW_ALLOW_FILE_STORE=true
    is set, for `mlflow ui` too; SQLite is MLflow's own recommended local store and needs no
    server. View with `mlflow ui --backend-store-uri sqlite:///<run_dir>/mlflow.db`. A `file:`
    URI still works when that variable is set; any server URI (http://...) works as usual.
    """

    def __init__(
        self,
        run_dir: str | Path,
        run_name: str,
        config_dict: dict | None = None,
        tracking_uri: str | None = None,
        experiment: str = "relay",
    ):
        _require("mlflow", "MLflow")
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        run_dir = Path(run_dir).resolve()
        run_dir.mkdir(parents=True, exist_ok=True)
        self.tracking_uri = tracking_uri or f"sqlite:///{run_dir / 'mlflow.db'}"
        self._client = MlflowClient(self.tracking_uri)
        exp = self._client.get_experiment_by_name(experiment)
        if exp is not None:
            experiment_id = exp.experiment_id
        else:
            # Without an explicit location a SQLite store puts artifacts under ./mlruns of the
            # current directory, wherever the driver happens to start.
            experiment_id = self._client.create_experiment(
                experiment, artifact_location=(run_dir / "mlartifacts").as_uri()
            )
        self.run_id = self._client.create_run(experiment_id, run_name=run_name).info.run_id

        params = [
            Param(_mlflow_key(k), str(v)[:6000])  # 6000: MLflow's param value limit
            for k, v in flatten_config(config_dict or {}).items()
        ]
        for i in range(0, len(params), 100):  # 100: MLflow's per-batch param limit
            self._client.log_batch(self.run_id, params=params[i : i + 100])

    def log(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        ms = int(time.time() * 1000)
        batch = [Metric(_mlflow_key(k), v, ms, int(step)) for k, v in metrics.items()]
        for i in range(0, len(batch), 1000):  # 1000: MLflow's per-batch metric limit
            self._client.log_batch(self.run_id, metrics=batch[i : i + 1000])

    def close(self) -> None:
        if self._client is not None:
            self._client.set_terminated(self.run_id, "FINISHED")
            self._client = None


def _mlflow_key(key: str) -> str:
    return _MLFLOW_BAD_CHARS.sub("_", key)[:250]


def flatten_config(config: dict, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}, "c": [1, 2]} -> {"a.b": 1, "c": "[1, 2]"} (lists as JSON text)."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten_config(value, name + "."))
        elif isinstance(value, (list, tuple)):
            flat[name] = json.dumps(value, default=str)
        else:
            flat[name] = value
    return flat


# ---------------------------------------------------------------------------------------------
# Fan-out


class MultiLogger:
    """Sends every step to each logger; closes all of them even if one fails."""

    def __init__(self, loggers: list[Logger]):
        self.loggers = list(loggers)

    def log(self, metrics: dict[str, Any], step: int) -> None:
        clean = _as_floats(metrics)
        for logger in self.loggers:
            logger.log(clean, step)

    def close(self) -> None:
        first_error: BaseException | None = None
        for logger in self.loggers:
            try:
                logger.close()
            except BaseException as e:  # noqa: BLE001 - close the rest, re-raise after
                first_error = first_error or e
        self.loggers = []
        if first_error is not None:
            raise first_error

    def __enter__(self) -> MultiLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_loggers(
    logging_cfg: LoggingConfig, run_dir: Path, run_name: str, config_dict: dict, total_steps: int
) -> MultiLogger:
    """Build the loggers `logging_cfg` enables (checked by relay.config.validate_logging)."""
    run_dir = Path(run_dir)
    builders = []
    if logging_cfg.console:
        builders.append(lambda: ConsoleLogger(total_steps, every=logging_cfg.console_every))
    if logging_cfg.jsonl:
        builders.append(lambda: JsonlLogger(run_dir))
    if logging_cfg.tensorboard:
        builders.append(lambda: TensorBoardLogger(run_dir, config_dict))
    if logging_cfg.wandb:
        builders.append(
            lambda: WandbLogger(run_dir, run_name, logging_cfg.wandb_project, logging_cfg.wandb_mode, config_dict)
        )
    if logging_cfg.mlflow:
        builders.append(
            lambda: MLflowLogger(
                run_dir, run_name, config_dict, logging_cfg.mlflow_tracking_uri, logging_cfg.mlflow_experiment
            )
        )
    made: list[Logger] = []
    try:
        for build in builders:
            made.append(build())
    except BaseException:
        try:  # no half-open W&B run or progress bar left behind
            MultiLogger(made).close()
        except Exception:  # noqa: BLE001 - the build error is the one to report
            pass
        raise
    return MultiLogger(made)


__all__ = [
    "CONSOLE_FIELDS",
    "ConsoleLogger",
    "JsonlLogger",
    "Logger",
    "LoggingConfig",
    "MLflowLogger",
    "MissingLoggerDependency",
    "MultiLogger",
    "TensorBoardLogger",
    "WandbLogger",
    "flatten_config",
    "format_line",
    "make_loggers",
]
