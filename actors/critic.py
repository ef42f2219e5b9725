"""Critic: a value model for PPO/GAE, on its own pool, with its own optimizer and checkpoint state.

The value model is the policy architecture with a scalar head (transformers' token
classification head with one label: a linear layer on the last hidden state), initialised
from the policy's weights or from `critic.model_path`.
"""

from __future__ import annotations

import time

import torch

from actors.plumbing import on_rank_group
from actors.rank_group import RankMember, UpdatingRankGroupMember
from relay.algos.objective import critic_objective
from relay.checkpoint.atomic import flatten_optimizer_state, group_bytes, unflatten_optimizer_state
from relay.checkpoint.dcp import load_shards, save_shards
from relay.config.role_settings import CriticSettings
from relay.fault_points import hit
from relay.models.loading import DTYPES, actor_device, import_transformers
from relay.models.resolve import model_folder
from relay.types import Batch, Sample
from relay.update.batch import as_batch, prepare_batch
from relay.update.fsdp import checkpoint_activations, gather_rows, master_dtype, share_rows
from relay.update.loop import run_update
from relay.update.lr_schedule import make_lr_scheduler
from relay.update.policy import response_values
from relay.update.precision import autocast_forward


class Critic(UpdatingRankGroupMember):
    repr_format = "critic-0, step {updates}, {tokens_per_s:.0f} tok/s, {last_update}"  # actors/plumbing.py

    def __init__(self, settings: CriticSettings, model_path: str, num_threads: int):
        torch.set_num_threads(num_threads)
        torch.manual_seed(settings.seed + 1)
        self.settings, self.training = settings, settings.training
        c, m = settings.critic, settings.model
        transformers = import_transformers()
        transformers.utils.logging.set_verbosity_error()  # the new value head's "newly initialized" notice is expected
        self.model = transformers.AutoModelForTokenClassification.from_pretrained(
            model_folder(c.model_path, "critic.model_path") if c.model_path else model_path,
            num_labels=1,
            dtype=DTYPES[master_dtype(m, self.training)],
            trust_remote_code=m.trust_remote_code,
        )
        self.device = actor_device()
        self.model.to(self.device)
        autocast_forward(self.model, self.training, self.device)  # training.mixed_precision (relay/update/precision.py)
        # Dropout off (gradients still flow): with it, logprobs/values recomputed on the same weights
        # differ run to run, so PPO ratios and exact resume break.
        self.model.eval()
        if self.training.activation_checkpointing:
            checkpoint_activations(self.model)
        self.ranks = RankMember()  # a rank group's member when resources.critic.count > 1 (actors/rank_group.py)
        self._make_optimizer()

    def _make_optimizer(self) -> None:
        c = self.settings.critic
        # fused outside a rank group, as the Learner's (one kernel: 3x faster on CPU than torch's default loop)
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=c.lr, weight_decay=c.weight_decay, fused=not self.ranks.sharded
        )
        self.scheduler = make_lr_scheduler(self.optimizer, self.training)  # the learner's schedule, critic.lr

    @on_rank_group("every_rank")
    @torch.no_grad()
    def compute_values(self, step: list[Sample] | Batch) -> torch.Tensor | None:
        """Values of every row; a rank group's ranks each compute their rows, rank 0 returns them all."""
        hit("critic.forward")
        batch = as_batch(step)
        share, has_rows = share_rows(batch) if self.ranks.sharded else (batch, True)
        share = share.to(self.device)
        values = (response_values(self.model, share) * share.loss_mask).cpu()
        return gather_rows(values, has_rows) if self.ranks.sharded else values

    @on_rank_group("every_rank")
    def update(self, step: list[Sample] | Batch, **inputs) -> dict[str, float]:
        """From a step's samples: the learner's Batch and returns (relay/update/batch.py, the same
        inputs, the same numbers), then the critic's update. A prepared Batch is trained on as it is."""
        batch = step if isinstance(step, Batch) else prepare_batch(step, self.settings.algorithm, **inputs)[0]
        if not batch.loss_mask.any():  # a batch of failures only: the learner skips it too
            return {}
        return self._update(batch)

    def _update(self, batch: Batch) -> dict[str, float]:
        """Clipped value loss against the returns, with the learner's epochs, shuffled mini-batches
        (the same order: same seed rule) and token-weighted micro-batches (relay/update/loop.py)."""
        start = time.perf_counter()
        metrics = run_update(
            self.model,
            self.optimizer,
            batch.to(self.device),
            self._loss,
            self.training,
            seed=self.settings.seed,
            weight_by_tokens=True,
            scheduler=self.scheduler,
            rank=self.ranks.rank,
            world_size=self.ranks.world_size,
        )
        out = {f"critic/{k}": v for k, v in metrics.items()}
        out["time/critic_update_s"] = self.update_seconds = time.perf_counter() - start
        self.updates += 1
        self.tokens_per_s = float(batch.loss_mask.sum()) / max(self.update_seconds, 1e-9)
        return out

    def _loss(self, micro: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        values = response_values(self.model, micro)
        return critic_objective(values, micro.values, micro.returns, micro.loss_mask, self.settings.critic.clip_range)

    @on_rank_group("not_on_group")
    def state(self, as_bytes: bool = False) -> tuple[dict[str, dict[str, torch.Tensor] | bytes], dict]:
        """Weights, optimizer, lr schedule; `as_bytes`: as the Learner's."""
        tensors, skeleton = flatten_optimizer_state(self.optimizer.state_dict())
        tensors = {k: v.to("cpu", copy=True) for k, v in tensors.items()}  # a snapshot, not views of live state
        weights = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
        groups = {"critic": weights, "critic_optimizer": tensors}
        return (group_bytes(groups) if as_bytes else groups), {
            "optimizer": skeleton,
            "updates": self.updates,
            "lr_schedule": self.scheduler.state_dict(),
        }

    @on_rank_group("not_on_group")
    def load_state(self, groups: dict[str, dict[str, torch.Tensor]], meta: dict) -> None:
        self.model.load_state_dict(groups["critic"], strict=True)
        self.optimizer.load_state_dict(unflatten_optimizer_state(groups["critic_optimizer"], meta["optimizer"]))
        self.updates = meta.get("updates", 0)
        if "lr_schedule" in meta:
            self.scheduler.load_state_dict(meta["lr_schedule"])

    @on_rank_group("every_rank")
    def save_shards(self, folder: str) -> None:
        extra = {"lr_schedule": self.scheduler.state_dict(), "updates": self.updates}
        save_shards(folder, self.model, self.optimizer, extra)

    @on_rank_group("every_rank")
    def load_shards(self, folder: str) -> None:
        extra = load_shards(folder, self.model, self.optimizer)
        self.scheduler.load_state_dict(extra["lr_schedule"])
        self.updates = extra.get("updates", 0)
