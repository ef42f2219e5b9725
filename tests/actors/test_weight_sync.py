"""Weight sync learner -> rollout workers through real actors, both transports (relay_trainer/weights.py):
after a sync every worker's model equals the learner's, bit for bit, tied weights still tied."""

from __future__ import annotations

import functools

import pytest
import ray
import torch

from relay.config import Config, ModelConfig, ResourcesConfig, RoleResources
from relay_trainer.pools import actor_pools
from relay_trainer.weights import sync_weights

pytestmark = pytest.mark.usefixtures("shared_ray")


def perturb(learner, seed: int) -> None:
    """Change every learner parameter, as an optimizer step would."""

    def fn(self, seed):
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in self.model.parameters():
                p.add_(torch.randn(p.shape, generator=g).to(p.device, p.dtype) * 0.01)

    ray.get(learner.__ray_call__.remote(fn, seed))


def model_of(actor, path: str, fn):
    """fn(the model at `path` inside the actor, e.g. "engine.model"), run in the actor."""
    return ray.get(actor.__ray_call__.remote(lambda self: fn(functools.reduce(getattr, path.split("."), self))))


def state_of(actor, path: str) -> dict[str, torch.Tensor]:
    return model_of(actor, path, lambda m: {k: v.cpu() for k, v in m.state_dict().items()})


def tied(actor, path: str) -> bool:
    return model_of(actor, path, lambda m: m.lm_head.weight.data_ptr() == m.model.embed_tokens.weight.data_ptr())


def check_sync(cfg: Config, model_path: str, run_name: str) -> str | None:
    """Sync twice, compare every worker with the learner; the address the broadcast group's store
    listens on (None for the object store)."""
    with actor_pools(cfg, model_path, run_name) as actors:
        assert bool(actors.weight_broadcast) == (cfg.resources.weight_sync == "broadcast")
        address = ray.get(
            actors.learner.__ray_call__.remote(
                lambda self: self.weight_socket.getsockname()[0] if self.weight_socket else None
            )
        )
        for version, seed in ((3, 0), (4, 1)):  # twice through the same group
            perturb(actors.learner, seed)
            seconds = sync_weights(actors, version)
            learner = state_of(actors.learner, "model")
            for worker in actors.rollout:
                assert ray.get(worker.weight_version.remote()) == version
                got = state_of(worker, "engine.model")
                assert got.keys() == learner.keys()
                assert all(torch.equal(got[k], learner[k]) for k in learner), [
                    k for k in learner if not torch.equal(got[k], learner[k])
                ]
                assert tied(worker, "engine.model")
            print(f"{cfg.resources.weight_sync} sync to {len(actors.rollout)} workers: {seconds * 1e3:.1f} ms")
    return address


@pytest.mark.parametrize("transport", ["object_store", "broadcast"])
def test_every_worker_gets_the_learners_weights(tiny_model_path, transport):
    cfg = Config(
        model=ModelConfig(path=tiny_model_path),
        resources=ResourcesConfig(
            rollout=RoleResources(count=2, cpus=0.5),
            learner=RoleResources(cpus=0.5),
            env=RoleResources(cpus=0.1),
            weight_sync=transport,
        ),
    )
    address = check_sync(cfg, tiny_model_path, f"weights-{transport}")
    assert address == (None if transport == "object_store" else "127.0.0.1")  # one node: loopback only


def test_auto_picks_broadcast_only_between_whole_gpus():
    from relay_trainer.weights import broadcast_backend, uses_broadcast

    def res(learner_gpus, rollout_gpus, sync="auto"):
        return ResourcesConfig(
            learner=RoleResources(gpus=learner_gpus), rollout=RoleResources(gpus=rollout_gpus), weight_sync=sync
        )

    assert not uses_broadcast(res(0, 0)) and not uses_broadcast(res(0.5, 0.5)) and not uses_broadcast(res(1, 0))
    assert uses_broadcast(res(1, 1)) and broadcast_backend(res(1, 1)) == "nccl"
    assert uses_broadcast(res(0.5, 0.5, "broadcast")) and broadcast_backend(res(0.5, 0.5)) == "gloo"
    assert not uses_broadcast(res(1, 1, "object_store"))
