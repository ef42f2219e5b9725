"""What the run-health monitor costs the driver per step, against the step it watches
(docs/health.md, "Cost").

    python benchmarks/health_cost.py [RUN] [--repeat 20] [--no-ray]

RUN: a run folder (metrics.jsonl, and summary.json and config.yaml when there) or a metrics.jsonl.
Default: benchmarks/records/default-s0, the default task's 60 steps (`python driver.py
training.eval_every=10`, seed 0) with the keys the monitor reads and the step time kept.

Each step's record is replayed through what the driver does for health at that step, every call
timed on its own:

  signals     batch_signals over the step's samples. metrics.jsonl keeps no samples, so they are
              built to the record's shape: rollout/episodes episodes in rollout/groups groups,
              final texts of response/length_mean characters, tools/calls_per_episode tool calls
  observe     HealthMonitor.observe: the rules, the held-out bookkeeping, and the alarm lines
              (printed, flushed, to /dev/null); the evaluation before training from summary.json
  ray         the health/* Ray metrics (RunMetrics.record of the step's health/* values, on a
              local Ray; its `steps` counter is counted too), --no-ray: left out
  log         json.dumps of the health/* values: what they add to the metrics.jsonl line

The checkpoint's copy of the monitor (state_dict, pickled) is timed at checkpoint.every steps and
printed per checkpoint. Prints mean, p99 and max of each part and of the step's sum, and the sum's
mean against the median `time/step_s` of the same records. No timed assertion: the numbers are
the result.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pickle
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from relay.config import load_config  # noqa: E402
from relay.config.health import HealthConfig  # noqa: E402
from relay.health import HealthMonitor, batch_signals  # noqa: E402
from relay.health.rules import EVAL_KEYS  # noqa: E402
from relay.run import metric_keys as keys  # noqa: E402
from relay.run.metrics_file import load_metrics  # noqa: E402
from relay.types import FinishReason, Sample  # noqa: E402

DEFAULT_RUN = ROOT / "benchmarks" / "records" / "default-s0"
PARTS = ("signals", "observe", "ray", "log")
# The driver reaches the monitor from a ray.get that waited out the step, with the samples in hand.
# So each step sleeps between building its samples and the timed calls: timed straight after that
# work, the calls took the preemptions owed for it (on a busy 2-core machine, 20x their CPU time).
WAIT_S = 0.002
# Full (generation 2) garbage collections that ran inside a step's timed calls, in seconds: Python's
# collector walks every object of the process (Ray's and torch's modules included), so a call that
# allocates can pay for a pass that the whole driver's allocations made due.
collections: list[float] = []  # the current step's
full_collections: list[float] = []  # every timed step's
gc_started = [0.0]


def time_full_collections(phase: str, info: dict) -> None:
    if info["generation"] == 2 and phase == "start":
        gc_started[0] = time.perf_counter()
    elif info["generation"] == 2:
        collections.append(time.perf_counter() - gc_started[0])


gc.callbacks.append(time_full_collections)


def run_files(path: Path) -> tuple[list[dict], dict, HealthConfig, bool, int]:
    """The records, the evaluation before training, the health settings, tools.enabled and
    checkpoint.every of the run at `path`."""
    folder = path if path.is_dir() else path.parent
    records = load_metrics(path)
    before = {}
    if (summary := folder / "summary.json").is_file():
        s = json.loads(summary.read_text())
        before = {k: s[name] for k in EVAL_KEYS if (name := k.removeprefix("eval/") + "_before") in s}
    if (config := folder / "config.yaml").is_file():
        cfg = load_config(config)
        return records, before, cfg.health, cfg.tools.enabled, cfg.checkpoint.every
    return records, before, HealthConfig(), keys.TOOL_CALLS_PER_EPISODE in records[0], 0


def step_samples(record: dict) -> list[Sample]:
    """Samples of the record's shape, whose signals are the record's: rollout/episodes episodes in
    rollout/groups groups, groups/zero_adv_frac of them all-equal, the most common final text in
    response/top_share of them, texts of response/length_mean characters, response/truncated_frac
    cut, tools/calls_per_episode tool calls, and reward-model scores when the run had them."""
    n = int(record.get(keys.EPISODES, 128))
    groups = max(1, int(record.get(keys.GROUPS, n // 8)))
    equal = round(record.get(keys.ZERO_ADV_GROUPS, 0) * groups)
    common = max(1, round(record.get(keys.TOP_RESPONSE_SHARE, 0) * groups))
    length = max(1, round(record.get(keys.RESPONSE_LENGTH, 4)))
    calls = round(record.get(keys.TOOL_CALLS_PER_EPISODE, 0) * n)
    cut = round(record.get(keys.TRUNCATED_FRAC, 0) * n)
    rm = keys.RM_RULE_CORRELATION in record
    samples = []
    for i in range(n):
        g, j = i % groups, i // groups
        text = "common" if g < common and j == 0 else f"{g}.{j}"
        samples.append(
            Sample(
                prompt_ids=[1],
                reward=1.0 if g < equal else float(j % 2),
                group_id=g,
                finish_reason=FinishReason.LENGTH if i < cut else FinishReason.STOP,
                tool_calls=[{"name": "python", "arguments": {"code": "1+1"}}] * (calls // n + (i < calls % n)),
                final_text=text.rjust(length, "1"),
                meta={"rm_score": float(i % 7), "rule_reward": float(j % 2)} if rm else {},
            )
        )
    return samples


def replay(records, before, health, tools, every, ray_metrics, console) -> tuple[dict, list, list]:
    """One pass over the run: each part's (wall, CPU) seconds per step, each checkpoint's seconds,
    and each step's health/* metrics."""
    monitor = HealthMonitor(health, before, say=lambda line: print(line, file=console, flush=True))
    times: dict[str, list[tuple[float, float]]] = {p: [] for p in PARTS}
    checkpoints, outs = [], []
    for record in records:
        samples = step_samples(record)  # in the driver the step's samples are already there
        time.sleep(WAIT_S)  # the driver comes to the monitor from a ray.get that waited out the step
        collections.clear()
        logged = {k: v for k, v in record.items() if not k.startswith("health/")}  # the replay computes them
        clocks = [(time.perf_counter(), time.thread_time())]
        signals = batch_signals(samples, tools)
        clocks.append((time.perf_counter(), time.thread_time()))
        # the rules read the values the run logged; the samples above only give the call its work
        out = monitor.observe(record["step"], {**signals, **logged})
        clocks.append((time.perf_counter(), time.thread_time()))
        if ray_metrics is not None:
            ray_metrics.record(out)
        clocks.append((time.perf_counter(), time.thread_time()))
        json.dumps(out)
        clocks.append((time.perf_counter(), time.thread_time()))
        for part, (a, b) in zip(PARTS, zip(clocks, clocks[1:])):
            times[part].append((b[0] - a[0], b[1] - a[1]))
        outs.append(out)
        full_collections.extend(collections)
        if every and record["step"] % every == 0:
            t0 = time.perf_counter()
            pickle.dumps(monitor.state_dict())
            checkpoints.append(time.perf_counter() - t0)
    return times, checkpoints, outs


def p99(values: list[float]) -> float:
    return sorted(values)[min(len(values) - 1, round(0.99 * (len(values) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run", nargs="?", default=str(DEFAULT_RUN), help="a run folder or its metrics.jsonl")
    ap.add_argument("--repeat", type=int, default=20, help="passes over the run (each with a fresh monitor)")
    ap.add_argument("--no-ray", action="store_true", help="leave out the health/* Ray metrics")
    args = ap.parse_args()
    records, before, health, tools, every = run_files(Path(args.run))
    ray_metrics = None
    if not args.no_ray:
        import ray

        from relay_trainer.metrics import RunMetrics

        ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
        ray_metrics = RunMetrics("health-cost")
        time.sleep(5)  # Ray's own processes finish starting (on 2 cores they would share the timed calls' CPU)
    times: dict[str, list[tuple[float, float]]] = {p: [] for p in PARTS}
    checkpoints: list[float] = []
    with open(os.devnull, "w") as console:
        _, _, outs = replay(records, before, health, tools, every, ray_metrics, console)  # warm-up: imports, caches
        full_collections.clear()
        for _ in range(args.repeat):
            t, c, _ = replay(records, before, health, tools, every, ray_metrics, console)
            for part in PARTS:
                times[part] += t[part]
            checkpoints += c
    alarms = sum(1 for out in outs if out.get(keys.HEALTH_ALARMS))
    # the replay's health/* against those the run logged (a run from before a rule change may differ)
    logged = [{k: v for k, v in r.items() if k.startswith("health/")} for r in records]
    same = sum(
        1
        for out, old in zip(outs, logged)
        if old and out.keys() == old.keys() and all(abs(out[k] - old[k]) <= 1e-9 * max(1.0, abs(old[k])) for k in old)
    )
    total = [tuple(sum(times[p][i][c] for p in PARTS) for c in (0, 1)) for i in range(len(times["signals"]))]
    step_s = statistics.median(r[keys.STEP_S] for r in records if keys.STEP_S in r)
    episodes = int(records[0].get(keys.EPISODES, 0))
    print(
        f"run {args.run}: {len(records)} steps, {episodes} episodes a step; {args.repeat} passes, {len(total)} steps timed"
    )
    print(
        f"replayed health/*: {alarms} steps with an alarm; equal to the logged values at {same} of {len(records)} steps"
    )
    print(f"{'part':<9} {'wall mean ms':>12} {'p99 ms':>8} {'max ms':>8} {'CPU mean ms':>12}")
    shown = [p for p in PARTS if p != "ray" or ray_metrics is not None]
    for part, values in [*((p, times[p]) for p in shown), ("step sum", total)]:
        wall, cpu = [w for w, _ in values], [c for _, c in values]
        print(
            f"{part:<9} {1e3 * statistics.fmean(wall):>12.4f} {1e3 * p99(wall):>8.4f} {1e3 * max(wall):>8.4f} "
            f"{1e3 * statistics.fmean(cpu):>12.4f}"
        )
    slowest = max(total)
    print(f"slowest step: wall {1e3 * slowest[0]:.3f} ms, CPU {1e3 * slowest[1]:.3f} ms")
    if full_collections:
        print(
            f"full garbage collections inside timed calls: {len(full_collections)}, "
            f"{1e3 * statistics.fmean(full_collections):.1f} ms each (the slowest {1e3 * max(full_collections):.1f} ms)"
        )
    if checkpoints:
        print(f"checkpoint (state_dict, pickled, every {every} steps): {1e3 * statistics.fmean(checkpoints):.4f} ms")
    wall, cpu = statistics.fmean(w for w, _ in total), statistics.fmean(c for _, c in total)
    print(
        f"median step (time/step_s) {step_s:.3f} s; the monitor a step: wall {1e3 * wall:.3f} ms = "
        f"{100 * wall / step_s:.3f}%, CPU {1e3 * cpu:.3f} ms = {100 * cpu / step_s:.3f}%"
    )


if __name__ == "__main__":
    main()
