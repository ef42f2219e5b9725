"""training.mode sync (in its default layout, and as separate actors) vs one_step_off vs async in
one process, the modes alternating, on the default task (2-digit addition) and on a multi-turn
task whose episodes vary in length (textgame, 1-4 turns; there also async_cb: async with
continuous batching, rollout.max_live_episodes). Each run is the task's config as a user runs it
(its checkpoints and sample files included); samples/s is the wall time between logged steps from
step --skip + 1 on. Also tokens/s, the learner's and the rollout workers' idle shares, staleness,
and held-out accuracy (textgame: mean return) after the same number of samples. Prints a table and
writes each run's curves (relay.run.plot) and one plot of reward against samples consumed per
task. Numbers, never assertions.

    python benchmarks/async_speedup.py [--steps 25] [--textgame-steps 8] [--seeds 0 1 2 3] [--out DIR] [--partial]

--partial adds async_partial: async with rollout.partial (weights loaded mid-call between chunks
of rollout.partial_chunk tokens). Every overlapped mode trains with algorithm.tis_cap's default
there, 2.0: truncated importance sampling for samples from older weights.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ray  # noqa: E402

from relay.config import load_config  # noqa: E402
from relay.run.plot import plot_run  # noqa: E402
from relay_trainer import loop  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MODES = {
    "sync": ["training.mode=sync"],  # the default layout: colocated where possible
    "sync_separate": ["training.mode=sync", "resources.colocate=false"],
    "one_step_off": ["training.mode=one_step_off"],
    "async": ["training.mode=async", "training.max_staleness=1"],
    # continuous batching: one call of a whole step's prompts per worker, at most 4
    # groups' episodes (rollout.n = 8) live in the engine, a group leaving as soon as it ends
    "async_cb": ["training.mode=async", "training.max_staleness=1", "training.groups_per_call=16"]
    + ["rollout.max_live_episodes=32"],
    # --partial: weights that arrive mid-call load at the next chunk boundary (docs/pipeline.md, "Partial rollouts")
    "async_partial": ["training.mode=async", "training.max_staleness=1", "rollout.partial=true"]
    + ["rollout.partial_chunk=4"],
}
# async_cb only where episodes differ in length: a single-turn batch ends in one generate call
TASK_MODES = {
    "default": ("sync", "sync_separate", "one_step_off", "async"),
    "textgame": ("sync", "one_step_off", "async", "async_cb"),
}
TASKS = {"default": "configs/default.yaml", "textgame": "configs/textgame.yaml"}
# A user's run: the task's own checkpoints, sample files and evaluations stay in the timing; only
# the console lines and the final Hugging Face save (after the last step) are left out.
QUIET = ["logging.console=false", "checkpoint.save_hf_model=false"]


def one_run(config: str, mode: str, seed: int, steps: int, out: Path, extra: list[str], skip: int) -> dict:
    """Train; wall time between the logged steps from step `skip` on (start-up and warm-up left out)."""
    reports: list[float] = []
    cfg = load_config(
        REPO / config,
        [*QUIET, f"run.output_dir={out}", f"run.name={Path(config).stem}-{mode}-s{seed}", f"run.seed={seed}"]
        + [f"training.steps={steps}", *extra, *MODES[mode]],  # the mode's keys win
    )
    summary = loop.train(cfg, report=lambda step, m: reports.append(time.perf_counter()))
    records = [json.loads(line) for line in (Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    timed = records[skip:]
    seconds = reports[-1] - reports[skip - 1]
    samples = sum(cfg.training.prompts_per_step * cfg.rollout.n for _ in timed)
    held_out = "accuracy_after" if "accuracy_after" in summary else "mean_return_after"
    return {
        "samples_per_s": samples / seconds,
        "tokens_per_s": sum(r.get("rollout/tokens", 0.0) for r in timed) / seconds,
        "idle_learner": statistics.fmean(r["idle/learner"] for r in timed),
        "idle_rollout": statistics.fmean(r.get("idle/rollout", float("nan")) for r in timed),
        "staleness_mean": statistics.fmean(r["weights/staleness_mean"] for r in timed),
        "dropped": sum(r.get("rollout/dropped_stale", 0.0) for r in records),
        "mixed": sum(r.get("weights/mixed_samples", 0.0) for r in records),
        "held_out": summary[held_out],
        "held_out_before": summary[held_out.replace("after", "before")],
        "run_dir": summary["run_dir"],
        "curve": [(r["step"] * cfg.training.prompts_per_step * cfg.rollout.n, r["reward/mean"]) for r in records],
    }


def plot_curves(task: str, results: dict, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for mode, runs in results.items():
        for i, r in enumerate(runs):
            xs, ys = zip(*r["curve"])
            ax.plot(
                xs,
                ys,
                color={
                    "sync": "C0",
                    "one_step_off": "C1",
                    "async": "C2",
                    "async_cb": "C3",
                    "async_partial": "C4",
                    "sync_separate": "C5",
                }[mode],
                alpha=0.8,
                label=mode if i == 0 else None,
            )
    ax.set(xlabel="samples consumed", ylabel="training reward (mean)", title=f"{task}: reward against samples")
    ax.legend()
    path = out / f"{task}_reward_vs_samples.png"
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=25, help="training steps on the default task")
    parser.add_argument("--skip", type=int, default=5, help="steps left out of the timing (start-up and warm-up)")
    parser.add_argument("--textgame-steps", type=int, default=8, help="training steps on textgame (0: skip it)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--groups-per-call", type=int, default=16, help="async, default task: prompts per rollout call")
    parser.add_argument("--textgame-groups-per-call", type=int, default=4, help="async, textgame: prompts per call")
    parser.add_argument("--partial", action="store_true", help="add async_partial (rollout.partial) on every task")
    parser.add_argument("--out", default=None, help="folder for the runs and plots (default: a temporary one)")
    args = parser.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="relay-async-speedup-"))
    ray.init(num_cpus=6, include_dashboard=False, namespace="relay", log_to_driver=False)
    tasks = {"default": args.steps, "textgame": args.textgame_steps}
    for task, steps in tasks.items():
        if not steps:
            continue
        modes = TASK_MODES[task] + (("async_partial",) if args.partial else ())
        results: dict[str, list[dict]] = {m: [] for m in modes}
        per_call = args.groups_per_call if task == "default" else args.textgame_groups_per_call
        extra = [f"training.groups_per_call={per_call}"] + (["task.num_eval_rows=32"] if task == "textgame" else [])
        for k, seed in enumerate(args.seeds):
            order = list(modes)[k % len(modes) :] + list(modes)[: k % len(modes)]  # alternate who runs first
            for mode in order:
                r = one_run(TASKS[task], mode, seed, steps, out, extra, min(args.skip, steps - 1))
                results[mode].append(r)
                plot_run(r["run_dir"])
                print(
                    f"{task} seed {seed} {mode}: {r['samples_per_s']:.1f} samples/s, held-out {r['held_out']:.3f}",
                    flush=True,
                )
        base = statistics.fmean(r["samples_per_s"] for r in results["sync"])
        print(f"\n{task}: {steps} steps, seeds {args.seeds}, groups_per_call {per_call} (async)")
        print(
            f"{'mode':<13}{'samples/s':>10}{'x sync':>8}{'tokens/s':>10}{'idle L':>8}{'idle R':>8}{'stale':>7}{'dropped':>8}{'mixed':>7}  held-out after (before)"
        )
        for mode, runs in results.items():
            mean = {
                k: statistics.fmean(r[k] for r in runs)
                for k in (
                    "samples_per_s",
                    "tokens_per_s",
                    "idle_learner",
                    "idle_rollout",
                    "staleness_mean",
                    "dropped",
                    "mixed",
                )
            }
            held = ", ".join(f"{r['held_out']:.3f} ({r['held_out_before']:.3f})" for r in runs)
            print(
                f"{mode:<13}{mean['samples_per_s']:>10.1f}{mean['samples_per_s'] / base:>8.2f}{mean['tokens_per_s']:>10.0f}"
                f"{mean['idle_learner']:>8.2f}{mean['idle_rollout']:>8.2f}{mean['staleness_mean']:>7.2f}{mean['dropped']:>8.0f}{mean['mixed']:>7.0f}  {held}"
            )
        print(f"plot: {plot_curves(task, results, out)}; runs and their curves.png under {out}\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
