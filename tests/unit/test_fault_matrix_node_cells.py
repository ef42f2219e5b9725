"""The fault matrix's node-loss rows (benchmarks/fault_matrix_nodes.py) are real configurations: each
cell pins its point's role, and only that role, to the node that dies, in every training mode."""

from __future__ import annotations

from benchmarks.fault_matrix import MODES, all_cells, cell_config
from benchmarks.fault_matrix_nodes import NODE, NODE_ROLES, node_cpus, node_label


def node_resources(cfg) -> dict[str, str]:
    roles = {name: getattr(cfg.resources, name) for name in ("rollout", "learner", "reference", "critic", "env")}
    roles["tools"] = cfg.tools.executors
    return {name: res.node_resource for name, res in roles.items() if res.node_resource}


def test_every_node_point_has_a_row_per_mode_on_separate_actors():
    cells = [c for c in all_cells() if c.kind == NODE]
    assert {(c.point, c.mode) for c in cells} == {(p, m) for p in NODE_ROLES for m in MODES}
    assert {c.layout for c in cells} == {"separate"}


def test_a_node_cell_pins_its_role_alone_to_the_lost_node(tmp_path):
    for cell in (c for c in all_cells() if c.kind == NODE):
        cfg = cell_config(cell, tmp_path, "cell", faulty=True)
        role = NODE_ROLES[cell.point][0]
        assert node_resources(cfg) == {role: node_label(cell.point)}, cell.name
        assert cfg.training.mode == cell.mode and not cfg.resources.colocate
        assert node_cpus(cfg, cell.point) >= 1.0  # room for every actor of the role on the one node
