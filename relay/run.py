"""Run-folder and model plumbing the driver uses (pure: no ray)."""

from __future__ import annotations

import atexit
import shutil
import statistics
import time
from contextlib import contextmanager
from pathlib import Path

from relay.config import Config, ConfigError, resolve_dotted, save_resolved
from relay.data import load_rows
from relay.envs.arithmetic import make_rows
from relay.metric_keys import phase_seconds
from relay.models.check import check_model_source


def run_folder(cfg: Config, resume: bool) -> Path:
    """runs/<name>, not created yet (create_run_folder does that once the run starts).

    A fresh run never reuses a folder that holds another run's results: it takes `<name>-1`,
    `<name>-2`, ... instead. A folder left by a run that stopped before its first step (nothing
    in it but config.yaml and empty files) is not a result, and is reused.
    """
    base = Path(cfg.run.output_dir).expanduser() / cfg.run.name
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


def resolve_model_path(cfg: Config) -> str:
    """The folder (or hub name) every role loads: `tiny` is a model shipped in the repository
    (the task's own warm start for the built-in agent tasks); nothing is built or downloaded.
    Any other folder or hub name is checked here, before Ray or an actor starts (ConfigError)."""
    m = cfg.model
    if m.path == "tiny":
        from relay.models.shipped import tiny_model

        path = str(tiny_model(cfg.task.env))
    else:
        local = Path(m.path).expanduser()
        path = str(local) if local.exists() else m.path
        check_model_source(path, "model.path", m.trust_remote_code, tokenizer=m.tokenizer_path is None)
    if cfg.model.tokenizer_path is not None:
        check_model_source(cfg.model.tokenizer_path, "model.tokenizer_path", model=False)
    if cfg.critic.enabled and cfg.critic.model_path is not None:
        check_model_source(cfg.critic.model_path, "critic.model_path", cfg.model.trust_remote_code, tokenizer=False)
    return path


def task_rows(cfg: Config) -> tuple[list[dict], list[dict]]:
    t = cfg.task
    if t.name == "arithmetic":
        # Distinct seeds: held-out rows are (almost surely) not training rows.
        return make_rows(t.num_train_rows, cfg.run.seed, t.digits), make_rows(
            t.num_eval_rows, cfg.run.seed + 7_919, t.digits
        )
    if t.train_file is None and t.env is not None:  # the environment makes its own rows (reset(**row))
        env = resolve_dotted(t.env)
        return env.make_rows(t.num_train_rows, cfg.run.seed), env.make_rows(t.num_eval_rows, cfg.run.seed + 7_919)
    train = load_rows(t.train_file, t.prompt_key, t.answer_key)
    return train, (load_rows(t.eval_file, t.prompt_key, t.answer_key) if t.eval_file else train[: t.num_eval_rows])


class PhaseTimer:
    def __init__(self):
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, phase: str):
        start = time.perf_counter()
        yield
        key = phase_seconds(phase)
        self.seconds[key] = self.seconds.get(key, 0.0) + time.perf_counter() - start


def split(items: list, parts: int) -> list[list]:
    size = len(items) // parts
    return [items[i * size : (i + 1) * size] for i in range(parts)]


def summarize(rewards: list[float], accuracy_before: float, accuracy_after: float, run_dir: Path) -> dict:
    """Reward at the start and end of training, held-out accuracy before and after; printed too."""
    k = max(1, min(5, len(rewards) // 2))
    summary = {
        "reward_start": statistics.fmean(rewards[:k]),
        "reward_end": statistics.fmean(rewards[-k:]),
        "accuracy_before": accuracy_before,
        "accuracy_after": accuracy_after,
        "run_dir": str(run_dir),
    }
    print(
        f"\nrun {run_dir}: reward {summary['reward_start']:.3f} -> {summary['reward_end']:.3f} (mean of first/last {k} steps); "
        f"held-out accuracy {accuracy_before:.3f} -> {accuracy_after:.3f}"
    )
    return summary
