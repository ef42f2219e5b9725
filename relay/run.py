"""Run-folder and model plumbing the driver uses (pure: no ray)."""

from __future__ import annotations

import statistics
import time
from contextlib import contextmanager
from pathlib import Path

from relay.config import Config, TaskConfig, resolve_dotted
from relay.data import load_rows
from relay.envs.arithmetic import make_rows
from relay.envs.contract import seed_rows
from relay.metric_keys import phase_seconds


def run_folder(cfg: Config, resume: bool) -> Path:
    """runs/<name>; a fresh run never reuses a folder that holds another run's checkpoints."""
    base = Path(cfg.run.output_dir) / cfg.run.name
    if resume:
        if not base.exists():
            raise FileNotFoundError(f"--resume: no run folder {base} (run.output_dir / run.name)")
        return base
    folder, i = base, 1
    while folder.exists():
        folder, i = base.with_name(f"{base.name}-{i}"), i + 1
    folder.mkdir(parents=True)
    return folder


def resolve_model_path(cfg: Config) -> str:
    """The folder (or hub name) every role loads: `tiny` is a model shipped in the repository
    (the task's own warm start for the built-in agent tasks); nothing is built or downloaded."""
    if cfg.model.path == "tiny":
        from relay.models.shipped import tiny_model

        return str(tiny_model(cfg.task.env))
    local = Path(cfg.model.path).expanduser()
    return str(local) if local.exists() else cfg.model.path


def task_rows(cfg: Config) -> tuple[list[dict], list[dict]]:
    t = cfg.task
    if t.name == "arithmetic":
        # Distinct seeds: held-out rows are (almost surely) not training rows.
        return make_rows(t.num_train_rows, cfg.run.seed, t.digits), make_rows(
            t.num_eval_rows, cfg.run.seed + 7_919, t.digits
        )
    if t.train_file is None and t.env is not None:  # rows for reset(**row), or only an episode seed each
        env = resolve_dotted(t.env)
        make = env.make_rows if hasattr(env, "make_rows") else seed_rows
        return make(t.num_train_rows, cfg.run.seed), make(t.num_eval_rows, cfg.run.seed + 7_919)
    for_env = t.env is not None
    train = load_rows(t.train_file, t.prompt_key, t.answer_key, for_env)
    evals = load_rows(t.eval_file, t.prompt_key, t.answer_key, for_env) if t.eval_file else train[: t.num_eval_rows]
    return train, evals


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


def eval_metrics(task: TaskConfig, rewards: list[float]) -> dict[str, float]:
    """Held-out results: the share of episodes whose reward reaches task.success_threshold (accuracy;
    for environment tasks, success rate, next to the mean return)."""
    solved = sum(r >= task.success_threshold for r in rewards) / max(len(rewards), 1)
    if task.env is None:
        return {"eval/accuracy": solved}
    return {"eval/success_rate": solved, "eval/mean_return": statistics.fmean(rewards) if rewards else 0.0}


def summarize(rewards: list[float], before: dict[str, float], after: dict[str, float], run_dir: Path) -> dict:
    """Reward at the start and end of training, and each held-out metric before and after; printed too."""
    k = max(1, min(5, len(rewards) // 2))
    summary = {"reward_start": statistics.fmean(rewards[:k]), "reward_end": statistics.fmean(rewards[-k:])}
    for key in after:
        name = key.removeprefix("eval/")
        summary[f"{name}_before"], summary[f"{name}_after"] = before.get(key, float("nan")), after[key]
    summary["run_dir"] = str(run_dir)
    held_out = "; ".join(
        f"{key.removeprefix('eval/').replace('_', ' ')} {before.get(key, float('nan')):.3f} -> {v:.3f}"
        for key, v in after.items()
    )
    print(
        f"\nrun {run_dir}: reward {summary['reward_start']:.3f} -> {summary['reward_end']:.3f} "
        f"(mean of first/last {k} steps); held-out {held_out}"
    )
    return summary
