"""relay.run.plot draws each held-out point and each alarm at its step: read back from the figure's
line data, no image comparison."""

import json

import pytest

pytest.importorskip("matplotlib")

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from relay.run.plot import curves  # noqa: E402


def line(ax, gid: str):
    (found,) = [ln for ln in ax.get_lines() if ln.get_gid() == gid]
    return [float(x) for x in found.get_xdata()], [float(y) for y in found.get_ydata()]


def alarm_steps(ax) -> list[tuple[str, float]]:
    return sorted(
        (ln.get_gid(), float(ln.get_xdata()[0])) for ln in ax.get_lines() if ln.get_gid() not in ("curve", "ends")
    )


def write_run(folder, records: list[dict], summary: dict) -> None:
    folder.mkdir()
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (folder / "summary.json").write_text(json.dumps(summary))


def test_sync_evaluations_and_the_one_after_training_sit_at_their_steps(tmp_path):
    # eval_every 5 on 30 steps (a sync run such as math_tool's): in-run points at 5..30, the
    # evaluation before training at 0 and the one after training at 30, the last step
    records = [
        {"step": s, "reward/mean": s / 30} | ({"eval/success_rate": s / 60} if s % 5 == 0 else {}) for s in range(1, 31)
    ]
    records[6]["health/fired/entropy_collapse"] = 1.0  # step 7
    summary = {
        "success_rate_before": 0.1,
        "success_rate_after": 0.5,
        # the held-out check after training announces its alarm at the last step; metrics.jsonl has no record of it
        "health_alarms": [
            {"step": 7, "rule": "entropy_collapse", "value": 0.1},
            {"step": 30, "rule": "reward_hacking", "value": 0.2},
        ],
    }
    write_run(tmp_path / "run", records, summary)
    fig, panels = curves(tmp_path / "run")
    try:
        held_out = panels["eval/success_rate"]
        assert line(held_out, "curve") == ([5, 10, 15, 20, 25, 30], pytest.approx([s / 60 for s in range(5, 31, 5)]))
        assert line(held_out, "ends") == ([0, 30], [0.1, 0.5])
        assert line(panels["reward/mean"], "curve")[0] == list(range(1, 31))
        for ax in panels.values():  # every panel: the same alarms at the same steps, over the same step range
            assert alarm_steps(ax) == [("entropy_collapse", 7), ("reward_hacking", 30)]
            assert ax.get_xlim() == held_out.get_xlim() and ax.get_xlim()[0] < 0 and ax.get_xlim()[1] > 30
        legend = [t.get_text() for t in panels["reward/mean"].get_legend().get_texts()]
        assert legend == ["entropy_collapse", "reward_hacking"]
    finally:
        plt.close(fig)


def test_a_result_logged_late_sits_at_the_step_it_measured(tmp_path):
    # one_step_off / async: step 10's evaluation came back with step 12 (eval/lag_steps 2), and the
    # last step's was waited for at the checkpoint (lag 0); the supervised stage's result is step 0's
    records = [{"step": s, "reward/mean": 0.5} for s in range(1, 16)]
    records[11] |= {"eval/accuracy": 0.6, "eval/lag_steps": 2, "eval/weights_version": 10}
    records[14] |= {"eval/accuracy": 0.7, "eval/lag_steps": 0, "eval/weights_version": 15}
    summary = {"accuracy_before": 0.2, "accuracy_after_sft": 0.4, "accuracy_after": 0.7, "health_alarms": []}
    write_run(tmp_path / "run", records, summary)
    fig, panels = curves(tmp_path / "run" / "metrics.jsonl", keys=["eval/accuracy", "reward/mean"])
    try:
        assert line(panels["eval/accuracy"], "curve") == ([10, 15], [0.6, 0.7])
        assert line(panels["eval/accuracy"], "ends") == ([0, 15], [0.4, 0.7])
        assert alarm_steps(panels["eval/accuracy"]) == [] and panels["eval/accuracy"].get_legend() is not None
    finally:
        plt.close(fig)


def test_a_run_without_in_run_evaluations_still_shows_before_and_after(tmp_path):
    write_run(
        tmp_path / "run",
        [{"step": s, "reward/mean": 0.5} for s in (1, 2, 3)],
        {"accuracy_before": 0.5, "accuracy_after": 0.9},
    )
    fig, panels = curves(tmp_path / "run")
    try:
        assert list(panels) == ["reward/mean", "eval/accuracy"]
        assert line(panels["eval/accuracy"], "ends") == ([0, 3], [0.5, 0.9])
        assert not [ln for ln in panels["eval/accuracy"].get_lines() if ln.get_gid() == "curve"]
    finally:
        plt.close(fig)
