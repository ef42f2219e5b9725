"""benchmarks/elastic_records.py reads lost and duplicated samples, pools and first rollouts from a
run folder: the samples files are written here by relay's own SampleWriter (the format it parses)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.elastic_records import (
    comparable_steps,
    first_rollouts,
    lost_and_duplicated,
    pool_at_start,
    read_metrics,
    same_rewards,
    step_episodes,
)
from relay.run.samples import SampleWriter
from relay.types import Sample

TINY = str(Path(__file__).resolve().parents[2] / "relay/models/shipped/tiny")


def batch(groups: dict[int, list[float]]) -> list[Sample]:
    return [
        Sample(prompt_ids=[1, 2], response_ids=[3], loss_mask=[1], reward=r, group_id=g, finish_reason="stop")
        for g, rewards in groups.items()
        for r in rewards
    ]


def write_run(run_dir: Path, steps: list[dict[int, list[float]]]) -> None:
    writer = SampleWriter(run_dir / "samples", TINY, every=1, per_write=1000, total_steps=len(steps))
    for step, groups in enumerate(steps, start=1):
        writer.write(step, batch(groups))


def test_a_group_short_of_n_is_lost_and_one_past_n_is_duplicated(tmp_path):
    write_run(
        tmp_path,
        [
            {0: [1.0, 0.0], 1: [0.0, 0.0]},  # whole
            {0: [1.0], 1: [0.0, 1.0, 0.0, 1.0]},  # group 0 lost one, group 1 trained twice
            {1: [1.0, 1.0]},  # group 0 missing: two lost
        ],
    )
    episodes = step_episodes(tmp_path)
    assert [e.step for e in episodes] == [1, 2, 3]
    assert episodes[1].groups == {0: [1.0], 1: [0.0, 1.0, 0.0, 1.0]}
    assert lost_and_duplicated(episodes, prompts_per_step=2, n=2) == (3, 2)
    assert lost_and_duplicated(episodes[:1], prompts_per_step=2, n=2) == (0, 0)


def test_rewards_compare_only_over_the_steps_whose_pools_matched(tmp_path):
    write_run(tmp_path / "calm", [{0: [1.0, 0.0]}, {0: [1.0, 1.0]}, {0: [0.0, 0.0]}])
    write_run(tmp_path / "disturbed", [{0: [1.0, 0.0]}, {0: [1.0, 1.0]}, {0: [1.0, 0.0]}])
    calm, disturbed = step_episodes(tmp_path / "calm"), step_episodes(tmp_path / "disturbed")
    k = comparable_steps([1, 2, 2], [1, 2, 1])
    assert k == 2
    assert same_rewards(calm, disturbed, k) is True
    assert same_rewards(calm, disturbed, 3) is False
    assert same_rewards(calm, disturbed, 0) is None


def test_pools_and_first_rollouts_from_metrics(tmp_path):
    records = [
        {"step": 1, "rollout/workers": 1.0, "timeline/rollout/0/0/start_at": 100.0},
        {"step": 2, "rollout/workers": 2.0, "timeline/rollout/0/0/start_at": 110.0},
        {"step": 3, "rollout/workers": 2.0, "timeline/rollout/1/0/start_at": 121.5, "timeline/rollout/1/1/start_at": 120.5},
        {"step": 3, "rollout/workers": 2.0, "timeline/rollout/1/0/start_at": 121.5, "timeline/rollout/1/1/start_at": 120.5},
    ]  # fmt: skip
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    metrics = read_metrics(tmp_path)
    assert [m["step"] for m in metrics] == [1, 2, 3]  # a step logged twice is read once
    assert pool_at_start(metrics, minimum=1) == [1, 1, 2]
    assert first_rollouts(metrics) == {0: 100.0, 1: 120.5}
