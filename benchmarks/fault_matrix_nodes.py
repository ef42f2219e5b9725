"""The fault matrix's node-loss rows: the role that reaches the point runs alone on a node of its
own, and when one of its actors gets there the whole node dies (its raylet and every process under
it, SIGKILL: a preempted or crashed machine). A node with the same label joins a few seconds after
the GCS marks the lost one dead, as an autoscaler would, and the run must go on from there: rollout
shards and environment, tool and reference calls redone on the replacements, a learner restored in
place from its checkpoint.

Each run of a cell gets its own two-raylet cluster (ray.cluster_utils.Cluster): a head that holds
the driver and every other role, and the labelled node. The actor that reaches the point marks the
fault's token and stops itself (the `hang` kind), so the node dies with the call in flight.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from pathlib import Path

from benchmarks.local_nodes import local_cluster

NODE = "node"  # the matrix's kind for these rows (relay/fault_points.py's kinds are per process)
# point -> the role whose actors all run on the node that dies, and the config key that pins them there
NODE_ROLES = {
    "rollout.generate": ("rollout", "resources.rollout"),
    "weights.load.object_store": ("rollout", "resources.rollout"),  # on another node than the learner's
    "env.reset": ("env", "resources.env"),
    "env.step": ("env", "resources.env"),
    "tool.call": ("tools", "tools.executors"),
    "reference.forward": ("reference", "resources.reference"),
    "learner.update": ("learner", "resources.learner"),
    "checkpoint.write": ("learner", "resources.learner"),
}
HEAD_CPUS = 4  # every role but the lost one's: at most 2 rollout workers, the learner, the rest in fractions
BACK_AFTER_S = 2.0  # from the GCS marking the node dead to its replacement joining
# A replacement must be placed, load the model and answer within the role's deadlines
NODE_TIMEOUT_S = 180.0
# The GCS marks a node dead after this many missed health checks of this period (default 5 x 3 s).
HEALTH_CHECKS = {"health_check_period_ms": 1000, "health_check_failure_threshold": 5}


def node_label(point: str) -> str:
    return f"{NODE_ROLES[point][0]}_node"


def node_overrides(point: str) -> list[str]:
    """The config that puts the point's role on the labelled node, with deadlines a replacement meets."""
    key = NODE_ROLES[point][1]
    return [
        f"{key}.node_resource={node_label(point)}",
        f"resources.rollout_timeout_s={NODE_TIMEOUT_S}",
        f"resources.update_timeout_s={NODE_TIMEOUT_S}",
    ]


def node_cpus(cfg, point: str) -> float:
    """CPUs the labelled node offers: exactly what the role's actors ask for."""
    from relay.config.elastic import count_range

    res = functools.reduce(getattr, NODE_ROLES[point][1].split("."), cfg)  # e.g. cfg.resources.env
    return max(1.0, res.cpus * count_range(res.count).max)


class NodeLoss:
    """The cell's cluster; `lose_on(token)` removes the labelled node once the token exists and adds
    a node with the same label back."""

    def __init__(self, cluster, node, label: str, cpus: float, temp_dir: str):
        self.cluster, self.node, self.label, self.cpus, self.temp_dir = cluster, node, label, cpus, temp_dir
        self.done = threading.Event()

    def lose_on(self, token: Path) -> None:
        threading.Thread(target=self._lose_and_add_back, args=(token,), daemon=True).start()

    def _lose_and_add_back(self, token: Path) -> None:
        import ray

        while not token.exists():
            if self.done.wait(0.1):
                return
        self.cluster.remove_node(self.node, allow_graceful=False)
        while any(n["NodeID"] == self.node.node_id and n["Alive"] for n in ray.nodes()):
            time.sleep(0.2)
        time.sleep(BACK_AFTER_S)
        self.cluster.add_node(num_cpus=self.cpus, resources={self.label: 1}, temp_dir=self.temp_dir)
        self.done.wait()  # Ray's processes die with the thread that started them (PR_SET_PDEATHSIG)


@contextlib.contextmanager
def node_cluster(point: str, cpus: float):
    """A head with every other role and a node labelled for the point's role; this process joins it."""
    label = node_label(point)
    node_args = {"num_cpus": cpus, "resources": {label: 1}}
    with local_cluster({"num_cpus": HEAD_CPUS}, (node_args,), HEALTH_CHECKS) as (cluster, [node], temp_dir):
        loss = NodeLoss(cluster, node, label, cpus, temp_dir)
        try:
            yield loss
        finally:
            loss.done.set()
