"""Which roles no node can ever hold, named by their config key (relay_trainer/feasibility.py), without Ray."""

from relay.config import RoleResources
from relay_trainer.feasibility import role_bundle, unplaceable


def roles(**kw: RoleResources) -> dict:
    return {role: (res, role_bundle(res)) for role, res in kw.items()}


NODES = [{"CPU": 8.0, "memory": 1e9}, {"CPU": 16.0, "GPU": 4.0, "gpu_node": 1.0}]


def test_roles_that_fit_somewhere_are_fine():
    assert (
        unplaceable(roles(rollout=RoleResources(count=4, cpus=2, gpus=1), learner=RoleResources(cpus=8)), NODES) == []
    )
    assert unplaceable(roles(rollout=RoleResources(gpus=0.5, node_resource="gpu_node")), NODES) == []


def test_each_role_and_resource_no_node_has_is_named():
    problems = unplaceable(
        roles(
            learner=RoleResources(cpus=1, gpus=8),
            rollout=RoleResources(cpus=32),
            env=RoleResources(node_resource="cpu_node"),
        ),
        NODES,
    )
    assert problems == [
        "resources.learner.gpus=8: no node of the Ray cluster has 8 GPU (the largest has 4)",
        "resources.rollout.cpus=32: no node of the Ray cluster has 32 CPU (the largest has 16)",
        "resources.env.node_resource='cpu_node': no node of the Ray cluster declares the resource 'cpu_node'",
    ]


def test_all_actors_at_once_must_fit_the_cluster():
    problems = unplaceable(roles(rollout=RoleResources(count=5, gpus=1), learner=RoleResources(gpus=1)), NODES)
    assert problems == [
        "resources.*.gpus: the roles need 6 GPU in all (rollout 5, learner 1; count x gpus) but the Ray cluster has 4"
    ]


def test_a_v1_autoscaler_with_node_types_may_add_nodes(monkeypatch):
    """`ray start --autoscaling-config` (cluster.local.yaml) publishes no cluster config, only its
    report; a head without a config runs the same autoscaler, read-only, naming types node_<id>."""
    import json

    from ray.experimental import internal_kv

    from relay_trainer.feasibility import v1_autoscaler_has_node_types

    def report(mapping):
        status = json.dumps({"autoscaler_report": {"node_type_mapping": mapping}})
        monkeypatch.setattr(internal_kv, "_internal_kv_get", lambda key: status.encode())

    report({"fffff00000": "ray.head.default", "fffff00001": "rollout_worker"})
    assert v1_autoscaler_has_node_types()
    report({"10.0.0.1": "node_" + "ab" * 28, "10.0.0.2": "node_" + "cd" * 28})
    assert not v1_autoscaler_has_node_types()
    monkeypatch.setattr(internal_kv, "_internal_kv_get", lambda key: None)  # no autoscaler has reported
    assert not v1_autoscaler_has_node_types()
