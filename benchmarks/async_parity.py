"""Does async training learn as much per sample as sync? Paired by seed, on the default task.

Each seed trains sync, async (max_staleness=1; its null algorithm.tis_cap means truncated
importance sampling at 2.0) and async without it (async_no_tis: tis_cap=0) for the same number of
steps (equal samples), one run at a time, the order rotating with the seed. Held-out accuracy (256 prompts, greedy) is read every --eval-every steps,
so besides the final value it reports the area under the held-out curve (its mean over the run,
trapezoids from the before-training value): the final value saturates near 0.97, the curve less.
Per seed, means, and each variant's paired difference to sync: mean and 95% t interval.
Numbers, never assertions.

    python benchmarks/async_parity.py [--steps 40] [--eval-every 10] [--seeds 0 1 2 3 4 5 6 7]
        [--modes sync async async_no_tis] [--out DIR]

Each run's result goes to <out>/parity.jsonl as it finishes; `--summary-only` prints the table
from that file (what finished of an interrupted measurement). Learning per sample does not
depend on speed in sync mode; in async mode the timing decides which samples are stale (with
whole-step calls, training.groups_per_call=16, every sample is exactly one version old).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import async_speedup as bench  # noqa: E402  (one_run, the task configs, the mode overrides)

bench.MODES.setdefault("async_no_tis", [*bench.MODES["async"], "algorithm.tis_cap=0"])
bench.MODES.setdefault("async_tis1", [*bench.MODES["async"], "algorithm.tis_cap=1.0"])
bench.MODES.setdefault("async_tis5", [*bench.MODES["async"], "algorithm.tis_cap=5.0"])
EVAL_KEY = "eval/accuracy"
# two-sided 95% quantiles of Student's t, by degrees of freedom (no scipy in the environment)
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
T975 |= {11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093}


def held_out_curve(run_dir: str, before: float, after: float, steps: int) -> list[tuple[int, float]]:
    """(step, held-out accuracy) from before training to the end, the run's evaluations between."""
    records = [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    mid = [(r["step"], r[EVAL_KEY]) for r in records if EVAL_KEY in r and r["step"] < steps]
    return [(0, before), *mid, (steps, after)]


def area(curve: list[tuple[int, float]]) -> float:
    """Mean held-out accuracy over the run: trapezoids, divided by the steps."""
    total = sum((s1 - s0) * (a0 + a1) / 2 for (s0, a0), (s1, a1) in zip(curve, curve[1:]))
    return total / (curve[-1][0] - curve[0][0])


def at_step(curve: list[tuple[int, float]], step: int) -> float:
    return dict(curve).get(step, math.nan)


def paired(diffs: list[float]) -> str:
    """Mean of the paired differences and its 95% t interval."""
    n = len(diffs)
    if n < 2:
        return f"{diffs[0]:+.3f} (one seed)" if diffs else "-"
    mean, sd = statistics.fmean(diffs), statistics.stdev(diffs)
    half = T975.get(n - 1, 1.96) * sd / math.sqrt(n)
    return f"{mean:+.3f} [{mean - half:+.3f}, {mean + half:+.3f}]"


def summarize(rows: list[dict], modes: list[str], points: list[tuple[str, callable]]) -> None:
    by = {(r["mode"], r["seed"]): r for r in rows}
    seeds = sorted({r["seed"] for r in rows if all((m, r["seed"]) in by for m in modes)})
    print(f"\nseeds with every mode finished: {seeds}")
    for name, value in points:
        print(f"\n{name}")
        print(f"{'seed':<6}" + "".join(f"{m:>11}" for m in modes))
        for s in seeds:
            print(f"{s:<6}" + "".join(f"{value(by[(m, s)]):>11.3f}" for m in modes))
        print(f"{'mean':<6}" + "".join(f"{statistics.fmean(value(by[(m, s)]) for s in seeds):>11.3f}" for m in modes))
        for m in modes[1:]:
            diffs = [value(by[(m, s)]) - value(by[(modes[0], s)]) for s in seeds]
            worse = sum(d < 0 for d in diffs)
            print(f"  {m} - {modes[0]}: {paired(diffs)}, lower in {worse} of {len(diffs)} seeds")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--eval-every", type=int, default=10, help="steps between held-out evaluations (0: none)")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(8)))
    parser.add_argument(
        "--modes", nargs="+", default=["sync", "async", "async_no_tis"], help="the first is the baseline"
    )
    parser.add_argument("--out", default=None, help="folder for the runs and parity.jsonl (default: a temporary one)")
    parser.add_argument("--summary-only", action="store_true", help="print the table from <out>/parity.jsonl")
    args = parser.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="relay-async-parity-"))
    out.mkdir(parents=True, exist_ok=True)
    log = out / "parity.jsonl"
    if unknown := [m for m in args.modes if m not in bench.MODES]:
        print(f"--modes: unknown {unknown}; choose from {sorted(bench.MODES)}")
        return 2
    if not args.summary_only:
        import ray

        ray.init(num_cpus=6, include_dashboard=False, namespace="relay", log_to_driver=False)
        extra = ["training.groups_per_call=16", f"training.eval_every={args.eval_every}"]
        for k, seed in enumerate(args.seeds):
            order = args.modes[k % len(args.modes) :] + args.modes[: k % len(args.modes)]
            for mode in order:
                r = bench.one_run(bench.TASKS["default"], mode, seed, args.steps, out, extra)
                curve = held_out_curve(r["run_dir"], r["held_out_before"], r["held_out"], args.steps)
                row = {"mode": mode, "seed": seed, "steps": args.steps, "curve": curve, "area": area(curve)}
                row |= {key: r[key] for key in ("held_out", "samples_per_s", "staleness_mean", "dropped", "run_dir")}
                with log.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                print(
                    f"seed {seed} {mode}: held-out {r['held_out']:.3f}, area {row['area']:.3f}, "
                    f"{r['samples_per_s']:.1f} samples/s, staleness {r['staleness_mean']:.2f}",
                    flush=True,
                )
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    rows = [r for r in rows if r["steps"] == args.steps]
    points = [(f"held-out accuracy after {args.steps} steps", lambda r: r["held_out"])]
    if args.eval_every and args.steps % 2 == 0 and (args.steps // 2) % args.eval_every == 0:
        half = args.steps // 2
        points.append((f"held-out accuracy at step {half} (same runs)", lambda r: at_step(r["curve"], half)))
        points.append(
            (
                f"area under the held-out curve, steps 0-{half}",
                lambda r: area(r["curve"][: 1 + half // args.eval_every]),
            )
        )
    points.append((f"area under the held-out curve, steps 0-{args.steps} (mean accuracy)", lambda r: r["area"]))
    summarize(rows, args.modes, points)
    return 0


if __name__ == "__main__":
    sys.exit(main())
