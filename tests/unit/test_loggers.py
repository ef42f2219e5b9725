"""relay.run.loggers and relay.run.plot: every backend writes files that its own reader reads back."""

from __future__ import annotations

import glob
import io
import json
import math
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from relay.config import LoggingConfig
from relay.run.console import ConsoleLogger
from relay.run.loggers import (
    JsonlLogger,
    MissingLoggerDependency,
    MultiLogger,
    TensorBoardLogger,
    flatten_config,
    make_loggers,
)
from relay.run.metrics_file import load_metrics

REPO = Path(__file__).resolve().parents[2]
CONFIG = {"algo": {"name": "grpo", "kl_coef": 0.05}, "model": "tiny", "seeds": [1, 2]}


def steps_metrics(n: int = 5) -> list[tuple[int, dict[str, float]]]:
    return [
        (
            s,
            {
                "reward/mean": 0.1 * s,
                "kl/mean": 0.01 * s,
                "response/length_mean": 10.0 + s,
                "time/step_s": 0.5,
                "rollout/tokens_per_s": 1234.0,
            },
        )
        for s in range(1, n + 1)
    ]


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    # Nothing may leave the machine: W&B offline and quiet, no git probing, no telemetry.
    for key, value in {
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_DISABLE_GIT": "true",
        "WANDB_DISABLE_CODE": "true",
        "WANDB_CONSOLE": "off",
        "WANDB_DIR": str(tmp_path),
        "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config"),
        "WANDB_CACHE_DIR": str(tmp_path / "wandb-cache"),
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "DO_NOT_TRACK": "true",
    }.items():
        monkeypatch.setenv(key, value)


# ---------------------------------------------------------------------------------------------
# JSONL, console, fan-out


def test_jsonl_one_object_per_step_flushed(tmp_path):
    logger = JsonlLogger(tmp_path)
    logger.log({"reward/mean": 0.5, "loss": float("nan")}, step=1)
    # Flushed per line: readable before close.
    first = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert first["step"] == 1 and first["reward/mean"] == 0.5 and first["loss"] is None
    assert isinstance(first["time"], float)
    logger.log({"reward/mean": 0.75}, step=2)
    logger.close()
    # A resumed run appends and may repeat a step: the last record wins.
    again = JsonlLogger(tmp_path)
    again.log({"reward/mean": 0.8}, step=2)
    again.close()
    records = load_metrics(tmp_path)
    assert [r["step"] for r in records] == [1, 2]
    assert records[1]["reward/mean"] == 0.8


def test_console_without_tty_prints_compact_lines_every_k_steps():
    out = io.StringIO()  # not a terminal, like stdout under `ray job submit`
    logger = ConsoleLogger(total_steps=25, every=10, file=out)
    assert not logger.live
    for step, metrics in steps_metrics(25):
        logger.log(metrics, step)
    logger.close()
    lines = out.getvalue().splitlines()
    assert [line.split(" | ")[0] for line in lines] == ["step 1/25", "step 10/25", "step 20/25", "step 25/25"]
    assert "\x1b" not in out.getvalue()  # no cursor movement or colour codes in log files
    assert "reward 2" in lines[2] and "kl 0.2" in lines[2] and "tok/s 1,234" in lines[2]
    assert "step time 0.50s" in lines[2] and "eta" in lines[2] and "eta" not in lines[3]


def test_console_on_a_terminal_draws_a_bar_and_keeps_a_record():
    out = io.StringIO()
    logger = ConsoleLogger(total_steps=4, every=2, file=out, force_terminal=True)
    assert logger.live
    for step, metrics in steps_metrics(4):
        logger.log(metrics, step)
    logger.close()
    text = out.getvalue()
    assert "step 2/4" in text and "step 4/4" in text and "4/4" in text


def test_multilogger_fans_out_converts_and_closes_all(tmp_path):
    class Recorder:
        def __init__(self):
            self.seen, self.closed = [], False

        def log(self, metrics, step):
            self.seen.append((step, metrics))

        def close(self):
            self.closed = True

    class Broken(Recorder):
        def close(self):
            raise RuntimeError("disk gone")

    a, b, c = Recorder(), Broken(), Recorder()
    multi = MultiLogger([a, b, c])
    multi.log({"x": 1, "flag": True}, step=3)
    assert a.seen == c.seen == [(3, {"x": 1.0, "flag": 1.0})]
    with pytest.raises(TypeError, match="'name'"):
        multi.log({"name": "grpo"}, step=4)
    with pytest.raises(RuntimeError, match="disk gone"):
        multi.close()
    assert a.closed and c.closed


def test_make_loggers_default_is_console_and_jsonl(tmp_path):
    multi = make_loggers(LoggingConfig(console_every=1), tmp_path, "run", CONFIG, total_steps=2)
    assert [type(lg).__name__ for lg in multi.loggers] == ["ConsoleLogger", "JsonlLogger"]
    with multi:
        for step, metrics in steps_metrics(2):
            multi.log(metrics, step)
    assert len(load_metrics(tmp_path / "metrics.jsonl")) == 2


def test_missing_package_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb -> ImportError
    closed = []
    real_close = JsonlLogger.close
    monkeypatch.setattr(JsonlLogger, "close", lambda self: (closed.append(self), real_close(self)))
    cfg = LoggingConfig(console=False, wandb=True)
    with pytest.raises(MissingLoggerDependency, match=r"relay\[loggers\]"):
        make_loggers(cfg, tmp_path, "run", CONFIG, total_steps=1)
    assert len(closed) == 1  # the JSONL logger made before the failure is not left open


def test_flatten_config():
    assert flatten_config(CONFIG) == {"algo.name": "grpo", "algo.kl_coef": 0.05, "model": "tiny", "seeds": "[1, 2]"}


# ---------------------------------------------------------------------------------------------
# TensorBoard


def test_tensorboard_events_read_back(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logger = TensorBoardLogger(tmp_path, CONFIG)
    for step, metrics in steps_metrics(4):
        logger.log(metrics, step)
    logger.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert "reward/mean" in acc.Tags()["scalars"]
    events = acc.Scalars("reward/mean")
    assert [e.step for e in events] == [1, 2, 3, 4]
    assert [e.value for e in events] == pytest.approx([0.1, 0.2, 0.3, 0.4])


# ---------------------------------------------------------------------------------------------
# Weights & Biases (offline)


def read_wandb_records(path: Path) -> list:
    """Parse an offline run's .wandb file: W&B's header, then LevelDB-log-framed protobuf records.

    Layout: 7-byte header (b":W&B", magic 0xBEE1, version) then 32 KiB blocks of chunks, each
    with a 7-byte header (crc32c, length, type FULL=1 / FIRST=2 / MIDDLE=3 / LAST=4); a block
    tail shorter than a chunk header is zero padding.
    """
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    ident, magic, version = struct.unpack("<4sHB", data[:7])
    assert (ident, magic, version) == (b":W&B", 0xBEE1, 0)
    block, pos, pending, raw = 32768, 7, b"", []
    while pos + 7 <= len(data):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 0:  # zero fill at the end of a pre-allocated file
            break
        if kind == 1:
            raw.append(chunk)
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            raw.append(pending + chunk)
    records = []
    for payload in raw:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(payload)
        records.append(record)
    return records


def test_wandb_offline_run_read_back(tmp_path):
    from relay.run.loggers import WandbLogger

    logger = WandbLogger(tmp_path, "unit-run", project="relay-test", mode="offline", config_dict=CONFIG)
    for step, metrics in steps_metrics(3):
        logger.log(metrics, step)
    logger.close()

    files = glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "run-*.wandb"))
    assert len(files) == 1
    # W&B's service process writes the file; on a loaded machine (a CI run) its last records can
    # land a moment after finish() returns, so read until the run's final record is there.
    deadline = time.monotonic() + 60
    while True:
        records = read_wandb_records(Path(files[0]))
        kinds = [r.WhichOneof("record_type") for r in records]
        if ("run" in kinds and "exit" in kinds) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert "run" in kinds, f"no run record in {files[0]}; record types: {sorted(set(kinds))}"
    run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
    assert run.project == "relay-test" and run.display_name == "unit-run"
    config = {u.key: json.loads(u.value_json) for u in run.config.update}
    assert config["algo"] == CONFIG["algo"] and config["seeds"] == [1, 2]
    history = {}
    for r in records:
        if r.WhichOneof("record_type") == "history":
            row = {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in r.history.item}
            history[row["_step"]] = row
    assert sorted(history) == [1, 2, 3]
    assert [history[s]["reward/mean"] for s in (1, 2, 3)] == pytest.approx([0.1, 0.2, 0.3])
    assert history[3]["rollout/tokens_per_s"] == 1234.0


# ---------------------------------------------------------------------------------------------
# MLflow (local stores)


@pytest.mark.parametrize("store", ["default-sqlite", "file"])
def test_mlflow_local_store_read_back(tmp_path, monkeypatch, store):
    from mlflow.tracking import MlflowClient

    from relay.run.loggers import MLflowLogger

    uri = None
    if store == "file":
        monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3.x: opt-in only
        uri = f"file:{tmp_path / 'mlruns'}"
    logger = MLflowLogger(tmp_path, "unit-run", CONFIG, tracking_uri=uri)
    for step, metrics in steps_metrics(3):
        logger.log(metrics, step)
    logger.close()
    if uri is None:
        assert (tmp_path / "mlflow.db").is_file()

    client = MlflowClient(logger.tracking_uri)
    history = client.get_metric_history(logger.run_id, "reward/mean")
    assert [(m.step, m.value) for m in history] == [
        (1, pytest.approx(0.1)),
        (2, pytest.approx(0.2)),
        (3, pytest.approx(0.3)),
    ]
    run = client.get_run(logger.run_id)
    assert run.data.params["algo.kl_coef"] == "0.05" and run.data.params["seeds"] == "[1, 2]"
    assert run.info.status == "FINISHED" and run.info.run_name == "unit-run"


# ---------------------------------------------------------------------------------------------
# python -m relay.run.plot


def test_plot_cli_writes_png(tmp_path):
    path = tmp_path / "metrics.jsonl"
    with open(path, "w") as f:
        for step in range(1, 21):
            row = {
                "step": step,
                "time": 1000.0 + step,
                "reward/mean": math.tanh(step / 5),
                "reward/std": 0.1,
                "kl/mean": 0.001 * step,
                "response/length_mean": 30 + step,
                "time/step_s": 0.4,
            }
            if step % 5 == 0:
                row["eval/accuracy"] = step / 20
            f.write(json.dumps(row) + "\n")
    out = tmp_path / "out" / "curves.png"
    proc = subprocess.run(
        [sys.executable, "-m", "relay.run.plot", str(path), "-o", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "MPLBACKEND": "Agg", "MPLCONFIGDIR": str(tmp_path / "mpl")},
    )
    assert proc.returncode == 0, proc.stderr
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
    # IHDR size: five panels -> 2 columns x 3 rows of 6 x 3.2 inches at 100 dpi.
    assert struct.unpack(">II", data[16:24]) == (1200, 960)

    # Folder input writes <run>/curves.png; no known key is an error, not an empty image.
    from relay.run.plot import main

    assert main([str(tmp_path)]) == 0 and (tmp_path / "curves.png").is_file()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "metrics.jsonl").write_text('{"step": 1, "time": 0, "loss": 1.0}\n')
    assert main([str(tmp_path / "other")]) == 1
    assert main([str(tmp_path / "other"), "--keys", "loss"]) == 0


def test_plot_without_matplotlib_says_which_extra_in_one_line(tmp_path, monkeypatch, capsys):
    """A plain `pip install .` has no matplotlib: `relay plot` says what to install, no traceback."""
    from relay.run.plot import main

    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "time": 0, "reward/mean": 0.5}\n')
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises as if absent
    for argv in ([str(tmp_path)], [str(tmp_path), "--timeline"]):
        assert main(argv) == 2
        assert (
            capsys.readouterr().err == "relay plot needs matplotlib: pip install 'relay[plot]' (or 'relay[loggers]')\n"
        )
