"""What a run folder says about its rollout pool, for benchmarks/elastic.py: read from the run's own
records, never assumed. Pure: no ray.

- samples/step_*.txt (logging.samples_every=1, samples_per_write at least the batch): every
  episode a step trained on, with its group and reward. A sync step draws groups 0..P-1, each of
  rollout.n episodes: a group short of n lost samples, a group past n trained on some twice.
- metrics.jsonl: rollout/workers (the pool after each step), faults/*, and each worker's busy
  spans (timeline/rollout/<worker index>/<n>/start_at, unix seconds on the worker's clock).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from relay.run import metric_keys as keys

# render_episode's first line (relay/run/samples.py): "════ step 3 · episode 1 of 16 · group 0 · reward 1 · ..."
EPISODE_LINE = re.compile(r"^════ step (\d+) · episode (\d+) of (\d+) · group (\d+) · reward (\S+) ·", re.M)
SPAN_START = re.compile(r"^timeline/rollout/(\d+)/\d+/start_at$")


@dataclass
class StepEpisodes:
    step: int
    groups: dict[int, list[float]]  # group id -> the rewards of its episodes, in batch order


def step_episodes(run_dir: Path) -> list[StepEpisodes]:
    """Every step's trained episodes, from samples/step_*.txt."""
    out = []
    for path in sorted((Path(run_dir) / "samples").glob("step_*.txt")):
        groups: dict[int, list[float]] = {}
        headers = EPISODE_LINE.findall(path.read_text(encoding="utf-8"))
        for _, _, _, group, reward in headers:
            groups.setdefault(int(group), []).append(float(reward))
        out.append(StepEpisodes(int(path.stem.removeprefix("step_")), groups))
    return out


def lost_and_duplicated(episodes: list[StepEpisodes], prompts_per_step: int, n: int) -> tuple[int, int]:
    """(lost, duplicated) samples over the run: per step, groups 0..prompts_per_step-1 of n each."""
    lost = duplicated = 0
    for step in episodes:
        counts = Counter({g: len(r) for g, r in step.groups.items()})
        for group in range(prompts_per_step):
            lost += max(0, n - counts[group])
        duplicated += sum(max(0, c - n) for c in counts.values())
    return lost, duplicated


def read_metrics(run_dir: Path) -> list[dict]:
    """metrics.jsonl, one dict per step; a step logged twice (a late evaluation) keeps its last record.
    None at all: a run that stopped before its first step."""
    path, by_step = Path(run_dir) / "metrics.jsonl", {}
    for line in path.read_text().splitlines() if path.exists() else []:
        record = json.loads(line)
        by_step[record["step"]] = record
    return [by_step[s] for s in sorted(by_step)]


def pool_at_start(metrics: list[dict], minimum: int) -> list[int]:
    """The workers each step rolled out on at its start: the pool after the step before (min at the first)."""
    return [minimum, *(int(m[keys.ROLLOUT_WORKERS]) for m in metrics[:-1])]


def first_rollouts(metrics: list[dict]) -> dict[int, float]:
    """Worker index -> the unix time its first rollout began."""
    first: dict[int, float] = {}
    for m in metrics:
        for key, value in m.items():
            if match := SPAN_START.match(key):
                worker = int(match.group(1))
                first[worker] = min(first.get(worker, value), value)
    return first


def same_rewards(calm: list[StepEpisodes], disturbed: list[StepEpisodes], comparable: int) -> bool | None:
    """Whether the first `comparable` steps trained on the same rewards, group by group (None: no step to compare).
    A sync step's samples follow from the weights and, per shard, its prompts and the seed of the
    worker index it was sent to; so two runs agree step for step while their pools did."""
    if comparable == 0:
        return None
    pairs = list(zip(calm[:comparable], disturbed[:comparable], strict=True))
    return all(a.step == b.step and a.groups == b.groups for a, b in pairs)


def comparable_steps(calm: list[int], disturbed: list[int]) -> int:
    """How many first steps two runs rolled out on the same pool sizes (pool_at_start of each). Same
    sizes mean the same worker indices, so the same seeds: a worker added later takes the next index,
    and one lost mid-step leaves the pool a worker short at the next step, ending the comparison."""
    k = 0
    while k < min(len(calm), len(disturbed)) and calm[k] == disturbed[k]:
        k += 1
    return k
