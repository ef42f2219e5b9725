"""Run-folder and model plumbing the driver uses (pure: no ray)."""

from __future__ import annotations

import atexit
import json
import shutil
import statistics
import time
from contextlib import contextmanager
from pathlib import Path

from relay.config import Config, ConfigError, TaskConfig, resolve_dotted, save_resolved
from relay.envs import bfcl, chat_arithmetic, reasoning_gym, textarena
from relay.envs.arithmetic import make_rows
from relay.envs.contract import seed_rows
from relay.envs.data import load_rows
from relay.envs.tool_tasks import TOOL_TASKS, overlap
from relay.models.check import check_model_source, check_reward_model
from relay.models.resolve import is_named_model, model_folder
from relay.models.template_drift import check_template_drift
from relay.run import metric_keys as keys
from relay.run.metric_keys import phase_seconds, phase_start


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
    """The folder (or hub name) every role loads (relay/models/resolve.py): `tiny` is a model shipped
    in the repository (the task's own warm start for the built-in agent tasks); a GGUF file or
    `smollm2-135m` is converted once into a cached folder, here, before any actor starts. Any other
    folder or hub name is checked here, before Ray or an actor starts (ConfigError)."""
    m = cfg.model
    path = model_folder(m.path, "model.path", cfg.task.env)
    if not is_named_model(m.path):
        check_model_source(path, "model.path", m.trust_remote_code, tokenizer=m.tokenizer_path is None)
    if cfg.model.lora.rank:  # LoRA target modules that match nothing: one line now, not in the learner
        from relay.models.lora import target_module_problem

        if problem := target_module_problem(cfg, path):
            raise ConfigError([problem])
    if cfg.model.tokenizer_path is not None:
        tokenizer = model_folder(cfg.model.tokenizer_path, "model.tokenizer_path")  # a GGUF is converted now
        check_model_source(tokenizer, "model.tokenizer_path", model=False)
    check_template_drift(cfg, path)  # multi-turn runs: the template renders the tokens the agent loop appends
    if cfg.critic.enabled and cfg.critic.model_path is not None:
        critic = model_folder(cfg.critic.model_path, "critic.model_path")
        check_model_source(critic, "critic.model_path", cfg.model.trust_remote_code, tokenizer=False)
    if cfg.reward_model.path is not None:
        check_reward_model(cfg.reward_model)  # a sequence classifier (kind=classifier) with a chat template
    return path


def task_rows(cfg: Config) -> tuple[list[dict], list[dict]]:
    t = cfg.task
    if t.name == "arithmetic":
        # Distinct seeds: held-out rows are (almost surely) not training rows.
        return make_rows(t.num_train_rows, cfg.run.seed, t.digits), make_rows(
            t.num_eval_rows, cfg.run.seed + 7_919, t.digits
        )
    if t.name == "chat_arithmetic":  # held-out problems are never among the training rows
        ops = "".join(dict.fromkeys(t.ops))
        return chat_arithmetic.make_rows(
            t.num_train_rows, t.num_eval_rows, cfg.run.seed, ops, t.operand_min, t.operand_max
        )
    if t.name in TOOL_TASKS:  # held-out problems are never among the training rows
        example = {"worked_example": True} if t.worked_example else {}
        rows = TOOL_TASKS[t.name].make_rows(t.num_train_rows, t.num_eval_rows, cfg.run.seed, **example)
        return checked_split(*rows, "task.name")
    if t.name == "reasoning_gym":  # held-out rows from seeds training never uses, none asked in training
        return checked_split(*reasoning_gym.make_rows(t, cfg.run.seed), "task.datasets")
    if t.name == "bfcl":  # a split fixed by row id: held-out rows are never training rows, in any run
        return checked_split(*bfcl.make_rows(t, cfg.tools.parser, cfg.run.seed), "task.categories")
    if t.name == "textarena":  # one game seed per row; held-out seeds from a range training never draws
        return textarena.game_rows(t.num_train_rows, t.num_eval_rows, cfg.run.seed)
    if t.train_file is None and t.env is not None:  # rows for reset(**row), or only an episode seed each
        env = resolve_dotted(t.env)
        make = env.make_rows if hasattr(env, "make_rows") else seed_rows
        if hasattr(env, "make_eval_rows"):  # a held-out set of its own, never among the training rows
            try:
                held_out = env.make_eval_rows(t.num_eval_rows, cfg.run.seed)
            except ValueError as e:
                raise ConfigError([str(e)]) from None
            return checked_split(make(t.num_train_rows, cfg.run.seed), held_out, "task.env")
        return make(t.num_train_rows, cfg.run.seed), make(t.num_eval_rows, cfg.run.seed + 7_919)
    for_env = t.env is not None
    train = load_rows(t.train_file, t.prompt_key, t.answer_key, for_env)
    if not t.eval_file:
        return train, train[: t.num_eval_rows]
    return checked_split(train, load_rows(t.eval_file, t.prompt_key, t.answer_key, for_env), "task.eval_file")


def checked_split(train: list[dict], held_out: list[dict], key: str) -> tuple[list[dict], list[dict]]:
    """The rows as given, or ConfigError (one line) naming the first held-out row that is also a
    training question: held-out accuracy must measure problems never trained on."""
    if (rows := overlap(train, held_out)) is not None:
        raise ConfigError([f"{key}: held-out row {rows[0]} asks the same question as training row {rows[1]}"])
    return train, held_out


class PhaseTimer:
    """One step's phases: their seconds (time/<phase>_s) and, to draw them along the run's wall
    clock (relay.run.timeline), where each began: seconds after the timer was made (the step's
    start, whose unix time is `started_at`)."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.starts: dict[str, float] = {}
        self.origin, self.started_at = time.perf_counter(), time.time()

    @contextmanager
    def __call__(self, phase: str):
        start = time.perf_counter()
        self.starts.setdefault(phase_start(phase), start - self.origin)  # a repeated phase: its first start
        yield
        key = phase_seconds(phase)
        self.seconds[key] = self.seconds.get(key, 0.0) + time.perf_counter() - start

    def elapsed(self) -> float:
        return time.perf_counter() - self.origin

    def timeline(self) -> dict[str, float]:
        """The keys that place the step's phases on the wall clock."""
        return {keys.STEP_START_AT: self.started_at, **self.starts}


def split(items: list, parts: int) -> list[list]:
    size = len(items) // parts
    return [items[i * size : (i + 1) * size] for i in range(parts)]


def merge_rollout_metrics(per_call: list[dict[str, float]]) -> dict[str, float]:
    """One step's rollout metrics from its rollout calls' (each: a shard on worker "rollout/worker").
    Tokens/s: all tokens over the busiest worker's seconds; agent/*: means; tool counts: sums;
    idle seconds: per worker."""
    if not per_call:
        return {}
    busy: dict[int, float] = {}
    for i, m in enumerate(per_call):
        worker = int(m.get("rollout/worker", i))
        busy[worker] = busy.get(worker, 0.0) + m["rollout/seconds"]
    tokens = sum(m["rollout/tokens"] for m in per_call)
    per_worker = {
        f"{keys.TOKENS_PER_S}/{int(m.get('rollout/worker', i))}": m["rollout/tokens_per_s"]
        for i, m in enumerate(per_call)
    }
    agent = {k: sum(m[k] for m in per_call) / len(per_call) for k in per_call[0] if k.startswith("agent/")}
    tools = {k: sum(m[k] for m in per_call) for k in keys.TOOL_COUNTS if k in per_call[0]}
    idle = {}
    if "rollout/idle_s" in per_call[0]:
        idle[keys.ROLLOUT_IDLE_S] = sum(m["rollout/idle_s"] for m in per_call) / len(busy)
    return {
        **busy_spans(per_call),
        keys.TOKENS_PER_S: tokens / max(max(busy.values()), 1e-9),
        keys.REWARD_S: max(m.get("rollout/reward_seconds", 0.0) for m in per_call),  # scoring in the workers
        "rollout/tokens": float(tokens),
        **per_worker,
        **agent,
        **tools,
        **idle,
    }


# Spans closer than this are one: a stream's groups follow each other with only the hand-over
# between them, which no picture of a step can show, and each span costs two metric keys.
SPAN_GAP_S = 0.05


def busy_spans(per_call: list[dict[str, float]]) -> dict[str, float]:
    """Each rollout worker's busy spans (generation and scoring) from its calls' or groups' wall
    stamps, joined where they touch: the timeline's rollout bars (keys.rollout_span)."""
    stamps: dict[int, list[tuple[float, float]]] = {}
    for i, m in enumerate(per_call):
        if "rollout/started_at" in m:
            worker = int(m.get("rollout/worker", i))
            stamps.setdefault(worker, []).append((m["rollout/started_at"], m["rollout/ended_at"]))
    out = {}
    for worker, calls in stamps.items():
        joined: list[list[float]] = []
        for start, end in sorted(calls):
            if joined and start - joined[-1][1] < SPAN_GAP_S:
                joined[-1][1] = max(joined[-1][1], end)
            else:
                joined.append([start, end])
        for n, (start, end) in enumerate(joined):
            out[keys.rollout_span(worker, n, "start")] = start
            out[keys.rollout_span(worker, n, "end")] = end
    return out


def eval_metrics(task: TaskConfig, rewards: list[float]) -> dict[str, float]:
    """Held-out results: the share of episodes whose reward reaches task.success_threshold (accuracy;
    for environment tasks, success rate, next to the mean return)."""
    solved = sum(r >= task.success_threshold for r in rewards) / max(len(rewards), 1)
    if task.env is None:
        return {"eval/accuracy": solved}
    return {"eval/success_rate": solved, "eval/mean_return": statistics.fmean(rewards) if rewards else 0.0}


def summarize(
    rewards: list[float],
    before: dict[str, float],
    after: dict[str, float],
    run_dir: Path,
    after_sft: dict | None = None,
    seconds: dict[str, float] | None = None,
    alarms: list[dict] | None = None,
) -> dict:
    """Reward at the start and end of training, and each held-out metric before and after (and
    after the supervised stage, with sft.steps); printed too. `seconds`: when each held-out
    result was in, counted from the run's start (seconds_before, seconds_after_sft, seconds_after).
    `alarms`: the health monitor's, as health_alarms [{step, rule, value}] (a run with none: [])."""
    k = max(1, min(5, len(rewards) // 2))
    mean = lambda values: statistics.fmean(values) if values else float("nan")  # noqa: E731  (no RL steps: none)
    summary = {"reward_start": mean(rewards[:k]), "reward_end": mean(rewards[-k:])}
    held_out = []
    for key, value in after.items():
        name, start = key.removeprefix("eval/"), before.get(key, float("nan"))
        summary[f"{name}_before"], summary[f"{name}_after"] = start, value
        sft = ""
        if after_sft is not None:
            summary[f"{name}_after_sft"] = after_sft.get(key, float("nan"))
            sft = f" -> {summary[f'{name}_after_sft']:.3f} (after SFT)"
        held_out.append(f"{name.replace('_', ' ')} {start:.3f}{sft} -> {value:.3f}")
    summary |= {f"seconds_{when}": round(s, 1) for when, s in (seconds or {}).items()}
    summary["health_alarms"] = [{k: a[k] for k in ("step", "rule", "value")} for a in alarms or ()]
    summary["run_dir"] = str(run_dir)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")  # benchmarks read it
    print(
        f"\nrun {run_dir}: reward {summary['reward_start']:.3f} -> {summary['reward_end']:.3f} "
        f"(mean of first/last {k} steps); held-out {'; '.join(held_out)}"
        + (f"; health alarms: {', '.join(sorted({a['rule'] for a in alarms}))}" if alarms else "")
    )
    return summary
