"""The run folder: runs/<name>, made when the run starts, never reusing another run's results,
removed again when the run ends before it wrote anything (pure: no ray)."""

from __future__ import annotations

import atexit
import shutil
from pathlib import Path

from relay.config import Config, ConfigError, RunConfig, save_resolved


def run_folder(run: RunConfig, resume: bool) -> Path:
    """<run.output_dir>/<run.name>, not created yet (create_run_folder does that once the run starts).

    A fresh run never reuses a folder that holds another run's results: it takes `<name>-1`,
    `<name>-2`, ... instead. A folder left by a run that stopped before its first step (nothing
    in it but config.yaml and empty files) is not a result, and is reused.
    """
    base = Path(run.output_dir).expanduser() / run.name
    if resume:
        if not base.is_dir():
            raise ConfigError([f"--resume: there is no run {base} to resume (run.output_dir / run.name)"])
        return base
    folder, i = base, 1
    while folder.exists() and not _unstarted(folder):
        folder, i = base.with_name(f"{base.name}-{i}"), i + 1
    return folder


def _unstarted(folder: Path) -> bool:
    return folder.is_dir() and all(
        f.name == "config.yaml" or (f.is_file() and f.stat().st_size == 0) for f in folder.iterdir()
    )


def create_run_folder(cfg: Config, run_dir: Path) -> None:
    """Make the run folder and write the resolved config.yaml into it. If the process ends before
    the run wrote anything else (an actor that cannot start, a crash in the first step), the
    folder is removed again, so it leaves nothing behind."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        save_resolved(cfg, run_dir / "config.yaml")
    except OSError as e:
        raise ConfigError([f"run.output_dir: cannot create {run_dir} ({e.strerror or e})"]) from None
    atexit.register(remove_if_unstarted, run_dir)


def remove_if_unstarted(run_dir: Path) -> None:
    if _unstarted(run_dir):
        shutil.rmtree(run_dir, ignore_errors=True)
