"""The fault matrix (benchmarks/fault_matrix.py): a short run of the tiny model per cell, one fault
placed at a named point in step 2. A cell passes when the run completes every step, loses none,
trains no sample twice, trains every prompt group of every step, takes the fault in place unless
its point stops the run by design (then auto_resume goes on), and in sync mode matches the
undisturbed run's rewards step for step.

The default tier runs two cells: a learner killed in a colocated sync step, and an environment pool's
process killed in async mode; the slow tier runs every other cell, node-loss rows included
(`pytest -m slow tests/e2e/test_fault_matrix.py`, about two hours on 2 cores).
"""

from __future__ import annotations

import pytest

from benchmarks.fault_matrix import Cell, all_cells, judged_cell

pytestmark = pytest.mark.usefixtures("ray_session")

SAMPLE = [
    Cell("env.step", "sigkill", "async", "separate", "shared_memory"),
    Cell("learner.update", "ray_kill", "sync", "colocated", "none"),
]
BASELINES: dict = {}  # a configuration's undisturbed rewards, made once for the file's cells


def check(cell: Cell, tmp_path) -> None:
    outcome = judged_cell(cell, tmp_path, BASELINES)
    assert outcome.passed(), outcome.line()


def test_the_sample_crosses_both_layouts_and_the_sync_and_async_loops():
    assert all(c in all_cells() for c in SAMPLE)
    assert {c.mode for c in SAMPLE} == {"sync", "async"}
    assert {c.layout for c in SAMPLE} == {"separate", "colocated"}


@pytest.mark.parametrize("cell", SAMPLE, ids=lambda c: c.name)
def test_a_sampled_cell_survives(cell, tmp_path):
    check(cell, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("cell", [c for c in all_cells() if c not in SAMPLE], ids=lambda c: c.name)
def test_every_cell_survives(cell, tmp_path):
    check(cell, tmp_path)
