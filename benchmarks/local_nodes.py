"""A Ray cluster of several raylets on this machine (ray.cluster_utils.Cluster) that this process
joins: nodes to add and remove while a run goes on, for the node-loss tests and the fault
matrix's node-loss rows. No autoscaler: the caller adds a node where one would.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile


@contextlib.contextmanager
def local_cluster(head: dict, nodes: tuple[dict, ...] = (), system_config: dict | None = None):
    """Yields (cluster, the added nodes, temp_dir): a head started with `head` (ray.init's node
    arguments: num_cpus, resources), then one node per entry of `nodes`; `temp_dir` is for nodes
    added later. Everything is stopped and removed on exit."""
    import ray
    import ray._private.utils as ray_utils
    from ray.cluster_utils import Cluster

    temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: unix socket paths
    saved = ray_utils.write_ray_address, ray_utils.set_sigterm_handler
    # Cluster writes its address where a plain ray.init() on this machine would then join it; and
    # a node added from a thread (while the run waits in the main one) may set no SIGTERM handler
    ray_utils.write_ray_address = lambda *args, **kwargs: None
    ray_utils.set_sigterm_handler = lambda *args, **kwargs: None
    ray.shutdown()  # a Ray of an earlier run in this process
    cluster = None
    try:
        head_args = {"include_dashboard": False, "temp_dir": temp_dir, "dashboard_agent_listen_port": None, **head}
        if system_config:
            head_args["_system_config"] = system_config
        cluster = Cluster(initialize_head=True, head_node_args=head_args)
        added = [cluster.add_node(temp_dir=temp_dir, **node) for node in nodes]
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, namespace="relay", log_to_driver=False)
        yield cluster, added, temp_dir
    finally:
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
        ray_utils.write_ray_address, ray_utils.set_sigterm_handler = saved
        shutil.rmtree(temp_dir, ignore_errors=True)
