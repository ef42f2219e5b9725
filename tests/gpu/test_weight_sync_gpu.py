"""Weight sync with the learner on a GPU (HF engine, the tiny model).

One GPU: learner, reference and rollout worker share it (object store, or gloo broadcast from
CUDA tensors). Two or more GPUs: whole GPUs per role, so `auto` picks the NCCL broadcast
between the separate pools; every worker's weights must equal the learner's bit for bit.
"""

from __future__ import annotations

import pytest
import ray
import torch

from relay.config import Config, ModelConfig, ResourcesConfig, RoleResources
from tests.weight_checks import check_sync

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", autouse=True)
def ray_local():
    ray.init(
        num_cpus=8,
        num_gpus=torch.cuda.device_count(),
        include_dashboard=False,
        namespace="relay-test-gpu",
        log_to_driver=False,
    )
    yield
    ray.shutdown()


def shared_gpu(transport: str) -> ResourcesConfig:
    return ResourcesConfig(
        rollout=RoleResources(cpus=1, gpus=0.3),
        learner=RoleResources(cpus=1, gpus=0.3),
        reference=RoleResources(cpus=0.5, gpus=0.2),
        weight_sync=transport,
    )


@pytest.mark.parametrize("transport", ["object_store", "broadcast"])
def test_sync_from_a_gpu_learner_on_one_shared_gpu(tiny_model_path, transport):
    check_sync(
        Config(model=ModelConfig(path=tiny_model_path), resources=shared_gpu(transport)),
        tiny_model_path,
        f"gpu-{transport}",
    )


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL between separate pools needs 2 GPUs")
def test_nccl_broadcast_between_gpu_pools(tiny_model_path):
    workers = torch.cuda.device_count() - 1
    res = ResourcesConfig(rollout=RoleResources(count=workers, cpus=1, gpus=1), learner=RoleResources(cpus=1, gpus=1))
    assert res.weight_sync == "auto"
    check_sync(Config(model=ModelConfig(path=tiny_model_path), resources=res), tiny_model_path, "gpu-nccl")
