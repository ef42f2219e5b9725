"""One local Ray for two driver checks: resources no node can hold fail
right after connecting, naming the role and the resource, with no run folder left behind; and a
short run writes its sample episodes, which `python -m relay.run.show` prints."""

import pytest

import driver
from relay.run import show
from relay_trainer.feasibility import autoscaler_configured

SMALL = [
    "training.steps=2",
    "training.prompts_per_step=2",
    "rollout.n=2",
    "task.num_eval_rows=2",
    "logging.console=false",
    "checkpoint.save_hf_model=false",
]


def test_unsatisfiable_resources_fail_fast_naming_the_role(tmp_path, capsys, ray_session):
    assert not autoscaler_configured()  # a local Ray: nothing will ever add a node
    out = tmp_path / "runs"
    code = driver.main([f"run.output_dir={out}", "resources.learner.gpus=1", "resources.rollout.node_resource=big"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == [
        "relay: error: resources.rollout.node_resource='big': no node of the Ray cluster declares the resource "
        "'big' (and no autoscaler is configured to add one)",
        "relay: error: resources.learner.gpus=1: no node of the Ray cluster has 1 GPU (the largest has 0) "
        "(and no autoscaler is configured to add one)",
    ], err
    assert not out.exists()


@pytest.mark.slow  # a whole (short) run; the default tier's e2e runs check their sample files too
def test_a_run_writes_sample_episodes_that_show_prints(tmp_path, capsys, ray_session):
    assert driver.main([f"run.output_dir={tmp_path}", "run.name=seen", "logging.samples_every=1", *SMALL]) == 0
    samples = tmp_path / "seen" / "samples"
    assert sorted(p.name for p in samples.iterdir()) == ["step_000001.txt", "step_000002.txt"]
    text = (samples / "step_000002.txt").read_text()
    assert text.count("════ step 2 · episode") == 4  # logging.samples_per_write, default 4 (the whole batch here)
    assert "──── prompt" in text and "──── model turn 1" in text and "ground truth" in text
    capsys.readouterr()
    assert show.main([str(tmp_path / "seen")]) == 0
    assert "step_000002.txt" in capsys.readouterr().out
