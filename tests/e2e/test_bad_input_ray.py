"""Resources no node can hold fail right after connecting, in seconds, naming the role and the
resource; no run folder is left behind (issue 12, item 3)."""

import driver
from actors.feasibility import autoscaler_configured


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
