"""python -m relay.run.plot --timeline: the bars it reads from a synthetic metrics.jsonl (sync and
async shapes), the one line it prints for a run it cannot draw, and the stamps it needs, recorded
where the phases run (PhaseTimer, the rollout worker, merge_rollout_metrics)."""

from __future__ import annotations

import json
import time

import pytest

from relay.run import metric_keys as keys
from relay.run.plot import main
from relay.run.step_metrics import PhaseTimer, busy_spans, merge_rollout_metrics
from relay.run.timeline import build_timeline

T0 = 1_700_000_000.0  # unix seconds of the first step's start


def sync_records(steps: int = 4) -> list[dict]:
    """Rollout 2 s, an empty logprobs phase, update 3 s, sync 0.1 s, one after the other."""
    records = []
    for k in range(steps):
        start = T0 + 5.5 * k  # 0.3 s between steps: logging
        records.append(
            {
                "step": k + 1,
                "time": start + 5.3,
                keys.STEP_START_AT: start,
                keys.STEP_S: 5.2,
                keys.phase_start("step"): 0.0,
                keys.phase_start("rollout"): 0.01,
                keys.ROLLOUT_S: 2.0,
                keys.phase_start("reference"): 2.02,
                keys.phase_seconds("reference"): 1e-5,
                keys.phase_start("update"): 2.03,
                keys.UPDATE_S: 3.0,
                keys.phase_start("sync"): 5.04,
                keys.SYNC_S: 0.1,
                keys.rollout_span(0, 0, "start"): start + 0.02,
                keys.rollout_span(0, 0, "end"): start + 2.0,
            }
        )
    return records


def async_records(steps: int = 4) -> list[dict]:
    """The learner waits 2 s for the first batch, then 0.1 s: each worker rolls out the next
    step's groups (1.5 s) while the learner updates (3 s); the spans arrive with the next step."""
    records, start = [], T0
    previous_took = start
    for k in range(steps):
        wait = 2.0 if k == 0 else 0.1
        took = start + 0.01 + wait
        # step 1's groups were rolled out during its wait, later steps' during the previous update
        began, lengths = (start + 0.02, (2.0, 2.0)) if k == 0 else (previous_took + 0.01, (1.5, 1.7))
        spans = {}
        for w, seconds in enumerate(lengths):
            spans[keys.rollout_span(w, 0, "start")] = began
            spans[keys.rollout_span(w, 0, "end")] = began + seconds if k else took
        records.append(
            {
                "step": k + 1,
                keys.STEP_START_AT: start,
                keys.STEP_S: wait + 3.1,
                keys.phase_start("rollout"): 0.01,
                keys.ROLLOUT_S: wait,
                keys.phase_start("update"): 0.02 + wait,
                keys.UPDATE_S: 3.0,
                keys.phase_start("sync"): 3.03 + wait,
                keys.SYNC_S: 0.05,
                keys.QUEUE_DEPTH: float(k % 2),
                keys.IN_FLIGHT: 4.0 if k < steps - 1 else 0.0,  # none started for after the last step
                **spans,
            }
        )
        previous_took, start = took, start + wait + 3.2
    return records


def write(folder, records: list[dict]):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def overlap(a: tuple[float, float], b: tuple[float, float]) -> float:
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0]))


def test_sync_roles_take_turns():
    timeline = build_timeline(sync_records())
    # the logprobs phase took no time: no row of nothing but idle
    assert list(timeline.rows) == ["rollout 0", "learner", "weight sync"]
    assert [s for s, _, _ in timeline.steps] == [1, 2, 3, 4]
    assert timeline.steps[1][1:] == pytest.approx((5.5, 10.7))
    assert timeline.rows["learner"][1] == pytest.approx((5.5 + 2.03, 5.5 + 5.03))
    assert timeline.rows["rollout 0"][0] == pytest.approx((0.02, 2.0))
    rollout, learner = timeline.rows["rollout 0"], timeline.rows["learner"]
    assert sum(overlap(r, u) for r in rollout for u in learner) == 0.0  # one after the other
    # busy 3 s of every 5.5 (the last step ends at 21.7)
    assert timeline.idle_share("learner") == pytest.approx(1 - 12.0 / 21.7)
    assert timeline.queue == [] and timeline.in_flight == []


def test_async_rollout_overlaps_the_update():
    timeline = build_timeline(async_records())
    assert list(timeline.rows) == ["rollout 0", "rollout 1", "learner", "weight sync"]
    rollout, learner = timeline.rows["rollout 1"], timeline.rows["learner"]
    # step 2's groups were rolled out inside step 1's update
    assert overlap(rollout[1], learner[0]) == pytest.approx(1.7, abs=1e-6)
    assert timeline.idle_share("learner") < 0.35 < timeline.idle_share("rollout 0")
    # buffer depth, placed where each step took its batch (the end of its wait)
    assert [d for _, d in timeline.queue] == [0.0, 1.0, 0.0, 1.0]
    assert timeline.queue[0][0] == pytest.approx(2.01)
    assert [n for _, n in timeline.in_flight] == [4.0, 4.0, 4.0, 0.0]


def test_timeline_png_next_to_the_run(tmp_path, capsys):
    run = write(tmp_path / "async-run", async_records())
    assert main(["--timeline", str(run)]) == 0
    png = run / "timeline.png"
    assert capsys.readouterr().out.strip() == str(png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = tmp_path / "elsewhere" / "sync.png"
    assert (
        main(["--timeline", str(write(tmp_path / "sync-run", sync_records()) / "metrics.jsonl"), "-o", str(out)]) == 0
    )
    assert out.is_file() and not (tmp_path / "sync-run" / "curves.png").exists()


@pytest.mark.parametrize(
    "contents",
    [
        None,  # a run folder without metrics.jsonl
        "",  # no steps yet
        '{"step": 1, "time": 0, "time/step_s": 1.0, "reward/mean": 0.5}\n',  # recorded without the timeline keys
        '{"step": 1, "timeline/step_start_at": 5, "time/step_s": 1.0}\n',  # no update phase
        '[1, 2]\n{"time": 3}\n',  # lines without a step number
    ],
)
def test_a_run_it_cannot_draw_gets_one_line(tmp_path, capsys, contents):
    run = tmp_path / "run"
    run.mkdir()
    if contents is not None:
        (run / "metrics.jsonl").write_text(contents)
    assert main(["--timeline", str(run)]) == 1  # lines without a step number: a warning each, kept off stderr's line
    err = capsys.readouterr().err
    assert err.startswith("relay.run.plot: ") and err.count("\n") == 1 and "Traceback" not in err
    assert not (run / "timeline.png").exists()
    if contents and "reward/mean" in contents:
        assert keys.STEP_START_AT in err


def test_keys_and_timeline_do_not_mix(tmp_path):
    with pytest.raises(SystemExit):
        main(["--timeline", "--keys", "reward/mean", str(tmp_path)])


# ---------------------------------------------------------------------------------------------
# where the stamps come from


def test_phase_timer_records_where_each_phase_began():
    timer = PhaseTimer()
    with timer("step"):
        with timer("rollout"):
            time.sleep(0.02)
        with timer("update"):
            pass
    marks = timer.timeline()
    assert marks[keys.STEP_START_AT] == pytest.approx(time.time(), abs=5.0)
    assert marks[keys.phase_start("step")] < marks[keys.phase_start("rollout")] < marks[keys.phase_start("update")]
    assert marks[keys.phase_start("update")] >= marks[keys.phase_start("rollout")] + 0.02
    assert marks[keys.phase_start("update")] <= timer.elapsed()


def test_busy_spans_join_a_streams_groups_and_keep_the_gaps():
    groups = [  # worker 0: three streamed groups back to back, then a call after a 1 s wait
        {"rollout/worker": 0, "rollout/started_at": 10.0, "rollout/ended_at": 11.0},
        {"rollout/worker": 0, "rollout/started_at": 11.001, "rollout/ended_at": 12.0},
        {"rollout/worker": 1, "rollout/started_at": 10.5, "rollout/ended_at": 12.5},
        {"rollout/worker": 0, "rollout/started_at": 13.0, "rollout/ended_at": 14.0},
        {"rollout/worker": 0, "rollout/started_at": 12.01, "rollout/ended_at": 12.5},  # came back late
    ]
    assert busy_spans(groups) == {
        keys.rollout_span(0, 0, "start"): 10.0,
        keys.rollout_span(0, 0, "end"): 12.5,
        keys.rollout_span(0, 1, "start"): 13.0,
        keys.rollout_span(0, 1, "end"): 14.0,
        keys.rollout_span(1, 0, "start"): 10.5,
        keys.rollout_span(1, 0, "end"): 12.5,
    }
    assert busy_spans([{"rollout/worker": 0}]) == {}  # a worker that stamps nothing: no bars


def test_the_rollout_worker_stamps_its_busy_spans(tiny_model_path):
    from actors.rollout import RolloutWorker
    from relay.config import load_config
    from relay.config.role_settings import RolloutSettings
    from relay.envs.arithmetic import make_rows

    settings = RolloutSettings.of(load_config(None, ["rollout.n=2"]))
    worker = RolloutWorker(settings, tiny_model_path, worker_index=0, num_threads=1)
    before = time.time()
    _, called = worker.rollout(make_rows(2, 0, 2), step=0, first_group_id=0)
    streamed = [m for _, m in worker.rollout_stream(make_rows(3, 0, 2), step=1, first_group_id=0)]
    after = time.time()
    assert before <= called["rollout/started_at"] <= called["rollout/ended_at"] <= streamed[0]["rollout/started_at"]
    for a, b in zip(streamed, streamed[1:]):  # each group's span begins where the last one ended
        assert a["rollout/started_at"] <= a["rollout/ended_at"] == b["rollout/started_at"]
    assert streamed[-1]["rollout/ended_at"] <= after
    merged = merge_rollout_metrics(streamed)  # the stream is one bar
    assert keys.rollout_span(0, 0, "start") in merged and keys.rollout_span(0, 1, "start") not in merged


def test_a_colocated_step_places_its_rollout_and_update_one_after_the_other():
    """OneCall: one actor call rolls out then updates and times both; the driver places them from
    the call's start."""
    from types import SimpleNamespace

    from relay.config import load_config
    from relay.config.role_settings import StepSettings
    from relay.envs.arithmetic import make_rows
    from relay.envs.data import PromptIterator
    from relay_trainer.learner_recovery import NoRecovery
    from relay_trainer.steps import OneCall

    seconds = {keys.ROLLOUT_S: 0.5, keys.UPDATE_S: 0.25}
    reply = ([], {"rollout/seconds": 0.5, "rollout/tokens": 1.0, "rollout/tokens_per_s": 2.0}, {}, seconds)
    learner = SimpleNamespace(rollout_and_update=SimpleNamespace(remote=lambda *a: "ref"))
    faults = SimpleNamespace(get=lambda ref, handle, what, long: reply, add=lambda counts: None)
    settings = StepSettings.of(load_config(None, []))
    actors = SimpleNamespace(learner=learner, faults=faults, recovery=NoRecovery())
    plan = OneCall(settings, actors, PromptIterator(make_rows(32, 0, 2), 0), None)
    plan.kl_ctl = SimpleNamespace(value=0.0)
    timer = PhaseTimer()
    time.sleep(0.01)
    plan.rollout_and_update(0, timer)
    starts = timer.timeline()
    assert 0.01 <= starts[keys.phase_start("rollout")] < timer.elapsed()
    assert starts[keys.phase_start("update")] == pytest.approx(starts[keys.phase_start("rollout")] + 0.5)
