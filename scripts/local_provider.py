"""Ray's fake multi-node provider with the one thing a cloud's provider has that it lacks: a node
whose raylet has died (killed, crashed: the machine is gone) is reported terminated, as a cloud
lists a dead machine's instance as terminated. The autoscaler then launches a replacement if the
run still asks for one.

Ray's own fake provider keeps listing such a node: the autoscaler shows it as pending
("uninitialized") for good, counts it toward the run's request, and never launches another, while
the run waits for the role that was on it (benchmarks/elastic.py kills nodes so). Its liveness
check cannot reap it either: a node missing from the heartbeat table gets a fresh heartbeat made
up for it each round.

Use it as the provider of a one-machine cluster (scripts/local_cluster.py, `start(provider=...)`):

    provider: {type: external, module: scripts.local_provider.LocalProvider, ...}   # and the
    # fake provider's keys (use_node_id_as_ip, gcs_address, ...); the head's autoscaler must be able
    # to import this module: PYTHONPATH holds the checkout.
"""

from __future__ import annotations

from ray._private import ray_constants
from ray.autoscaler._private.fake_multi_node.node_provider import FakeMultiNodeProvider


class LocalProvider(FakeMultiNodeProvider):
    def non_terminated_nodes(self, tag_filters):
        with self.lock:
            for node_id, entry in list(self._nodes.items()):
                node = entry.get("node")  # the head's entry has none: it is the autoscaler's own node
                if node is not None and not raylet_alive(node):
                    del self._nodes[node_id]
                    try:  # what is left of it (its log monitor); a failure here must not stop the autoscaler
                        node.kill_all_processes(check_alive=False, allow_graceful=False)
                    except Exception:  # noqa: BLE001
                        pass
            return super().non_terminated_nodes(tag_filters)


def raylet_alive(node) -> bool:
    """Whether the raylet this provider started for `node` (a ray._private.node.Node) still runs."""
    raylets = node.all_processes.get(ray_constants.PROCESS_TYPE_RAYLET, [])
    return any(info.process.poll() is None for info in raylets)
