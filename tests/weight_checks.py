"""Checks that every rollout worker holds the learner's weights, bit for bit, tied weights still tied
(relay_trainer/weights.py, both transports): on a run's named actors, or on actor pools made here."""

from __future__ import annotations

import functools

import ray
import torch

from relay.config import Config
from relay_trainer.pools import actor_pools
from relay_trainer.weights import sync_weights


def perturb(learner, seed: int, scale: float = 0.01) -> None:
    """Change every learner parameter, as an optimizer step would (and one that leaves some alone would not)."""

    def fn(self, seed):
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in self.model.parameters():
                p.add_(torch.randn(p.shape, generator=g).to(p.device, p.dtype) * scale)

    ray.get(learner.__ray_call__.remote(fn, seed))


def model_of(actor, path: str, fn):
    """fn(the model at `path` inside the actor, e.g. "engine.model"), run in the actor."""
    return ray.get(actor.__ray_call__.remote(lambda self: fn(functools.reduce(getattr, path.split("."), self))))


def state_of(actor, path: str) -> dict[str, torch.Tensor]:
    return model_of(actor, path, lambda m: {k: v.cpu() for k, v in m.state_dict().items()})


def tied(actor, path: str) -> bool:
    return model_of(actor, path, lambda m: m.lm_head.weight.data_ptr() == m.model.embed_tokens.weight.data_ptr())


def weight_address(learner) -> str | None:
    """The address the learner's broadcast-group store listens on (None: no broadcast group)."""
    return ray.get(
        learner.__ray_call__.remote(lambda self: self.weight_socket.getsockname()[0] if self.weight_socket else None)
    )


def check_workers(learner, workers: list, version: int) -> None:
    """Every worker (HF engine) at `version`, holding the learner's weights bit for bit, tied weights still tied."""
    want = state_of(learner, "model")
    for worker in workers:
        assert ray.get(worker.weight_version.remote()) == version
        got = state_of(worker, "engine.model")
        assert got.keys() == want.keys()
        assert all(torch.equal(got[k], want[k]) for k in want), [k for k in want if not torch.equal(got[k], want[k])]
        assert tied(worker, "engine.model")


def check_sync(cfg: Config, model_path: str, run_name: str) -> str | None:
    """Actor pools of `cfg`: sync twice, compare every worker with the learner; the address the
    broadcast group's store listens on (None for the object store)."""
    with actor_pools(cfg, model_path, run_name) as actors:
        assert bool(actors.weight_broadcast) == (cfg.resources.weight_sync == "broadcast")
        address = weight_address(actors.learner)
        for version, seed in ((3, 0), (4, 1)):  # twice through the same group
            perturb(actors.learner, seed)
            seconds = sync_weights(actors, version)
            check_workers(actors.learner, actors.rollout, version)
            print(f"{cfg.resources.weight_sync} sync to {len(actors.rollout)} workers: {seconds * 1e3:.1f} ms")
    return address
