"""Learner (the policy being trained) and Reference (frozen policy for KL).

One actor per role, or (resources.<role>.count > 1, or training.cpu_offload) one rank of a group
(actors/rank_group.py): then `join_rank_group` (RankGroupMember) shards the model with FSDP2, each
rank takes its share of every batch, and rank 0 answers for the group. The Learner's end of the
weight sync is SendsWeights (actors/weight_ends.py).
"""

from __future__ import annotations

import time

import torch

from actors.plumbing import on_rank_group
from actors.rank_group import RankGroupMember, RankMember, UpdatingRankGroupMember
from actors.restarts import is_restarted_actor
from actors.weight_ends import SendsWeights
from relay.algos.objective import Objective
from relay.checkpoint.atomic import flatten_optimizer_state, group_bytes, unflatten_optimizer_state
from relay.checkpoint.dcp import load_shards, save_shards
from relay.checkpoint.rng import capture_rng, restore_rng
from relay.config.resolved import UPDATE_FORWARD
from relay.config.role_settings import PolicySettings
from relay.failures import LearnerRestarted
from relay.fault_points import hit
from relay.models.loading import actor_device, load_model
from relay.models.lora import (
    adapters_disabled,
    attach_adapters,
    engine_weights,
    final_folder_writer,
    load_trainable_state,
    trainable_parameters,
    trainable_state_dict,
)
from relay.run.metric_keys import LEARNER_UPDATE_S
from relay.types import Batch, Sample
from relay.update.batch import as_batch, prepare_batch
from relay.update.fsdp import checkpoint_activations, gather_rows, master_dtype, save_hf_sharded, share_rows
from relay.update.loop import run_update
from relay.update.lr_schedule import make_lr_scheduler
from relay.update.old_logprobs import old_logprob_metrics, old_logprob_stats, old_logprobs_before_update
from relay.update.policy import compute_logprobs, response_logprobs
from relay.update.precision import autocast_forward, compute_precision
from relay.update.supervised import supervised_step


def group_logprobs(model, batch: Batch, temperature: float, ranks: RankMember, device) -> torch.Tensor | None:
    """compute_logprobs for one actor, or for a rank group: each rank its rows, all on rank 0."""
    if not ranks.sharded:
        return compute_logprobs(model, batch, temperature)
    share, has_rows = share_rows(batch)
    return gather_rows(compute_logprobs(model, share, temperature, device), has_rows)


class Reference(RankGroupMember):
    repr_format = "reference-0, frozen weights v0, {batches} batches scored"  # actors/plumbing.py
    batches = 0

    def __init__(self, settings: PolicySettings, model_path: str, num_threads: int):
        torch.set_num_threads(num_threads)
        self.training, self.temperature = settings.training, settings.temperature
        self.device = actor_device()
        m = settings.model
        self.model = (
            load_model(
                model_path,
                master_dtype(m, self.training),
                m.trust_remote_code,
                attn_implementation=m.attn_implementation,
            )
            .to(self.device)
            .eval()
        )
        autocast_forward(self.model, self.training, self.device)  # training.mixed_precision (relay/update/precision.py)
        self.ranks = RankMember()

    @on_rank_group("every_rank")
    def compute_logprobs(self, step: list[Sample] | Batch) -> torch.Tensor | None:
        hit("reference.forward")
        self.batches += 1
        return group_logprobs(self.model, as_batch(step), self.temperature, self.ranks, self.device)


class Learner(UpdatingRankGroupMember, SendsWeights):
    # actors/plumbing.py. `updates` is the policy's weight version (the driver tags the weights after
    # step N's update as version N) and comes back with a checkpoint.
    repr_format = "learner-0, weights v{updates}, step {updates}, {tokens_per_s:.0f} tok/s, {last_update}"

    def __init__(self, settings: PolicySettings, model_path: str, num_threads: int):
        torch.set_num_threads(num_threads)
        torch.manual_seed(settings.seed)
        self.settings, self.training, self.temperature = settings, settings.training, settings.temperature
        # The whole loss (relay/algos/objective.py); algorithm.tis_cap's null resolved by training.mode
        self.objective = Objective.from_settings(settings.algorithm, settings.tis_cap)
        self.device = actor_device()
        m = settings.model
        self.model = load_model(
            model_path, master_dtype(m, self.training), m.trust_remote_code, attn_implementation=m.attn_implementation
        ).to(self.device)
        # training.mixed_precision bf16: float32 masters, bf16 matmuls (relay/update/precision.py); on
        # the transformers model itself, which a peft wrapper's forward reaches too
        autocast_forward(self.model, self.training, self.device)
        if m.lora.rank:  # relay/models/lora.py: only adapters train; the base doubles as the reference
            self.model = attach_adapters(self.model, m.lora)
        # Dropout off (gradients still flow): with it, logprobs/values recomputed on the same weights
        # differ run to run, so PPO ratios and exact resume break.
        self.model.eval()
        if self.training.activation_checkpointing:
            checkpoint_activations(self.model)
        self.ranks = RankMember()
        self._make_optimizer()
        self.sft_optimizer = None  # the supervised stage's (sft.*), made on its first step
        # Ray rebuilt this actor after a loss: its weights are the model path's, not the run's. It
        # answers nothing the run reads until the driver restores it (relay_trainer/learner_recovery.py),
        # so a loss between two calls cannot pass for the run's state.
        self.needs_restore = is_restarted_actor()

    def precision(self):
        """The context the module's forward passes run in (bf16 autocast under mixed precision)."""
        return compute_precision(self.training, self.device)

    def _check_restored(self) -> None:
        if self.needs_restore:
            raise LearnerRestarted("the learner restarted and is not restored yet")

    @on_rank_group("every_rank")
    def restore(self, groups: dict[str, bytes] | None, meta: dict | None) -> int:
        """A replacement's state: a checkpoint's groups (its safetensors files' bytes) and meta, a
        rank group's checkpoint shards (meta {"shards": folder}, every rank reads its own), or with
        neither the constructor's weights and RNG, which are the run's start. Returns the version."""
        from safetensors.torch import load

        if meta is not None and "shards" in meta:
            self.load_shards(meta["shards"])
        elif groups is not None:
            self.load_state({name: load(data) for name, data in groups.items()}, meta)
        self.needs_restore = False
        return self.updates

    def _make_optimizer(self) -> None:
        t = self.training
        # Fused AdamW (one kernel over all parameters, CPU or GPU; what transformers' Trainer picks):
        # 3x faster than the per-tensor loop torch uses on CPU by default (the tiny model's
        # step on 2 cores). A rank group's DTensor parameters keep torch's default.
        self.optimizer = torch.optim.AdamW(
            trainable_parameters(self.model), lr=t.lr, weight_decay=t.weight_decay, fused=not self.ranks.sharded
        )
        self.scheduler = make_lr_scheduler(self.optimizer, t)

    def _weights_to_send(self) -> dict[str, torch.Tensor]:
        self._check_restored()
        # sharded, keep_vars: tied weights stay one parameter object, sent once
        # the whole (merged) weights, or with model.lora.sync the adapters alone
        return engine_weights(self.model, self.settings.adapters_only, keep_vars=self.ranks.sharded)

    def _weight_peer(self) -> bool:
        return self.ranks.rank > 0

    @on_rank_group("every_rank")
    def compute_logprobs(self, step: list[Sample] | Batch) -> torch.Tensor | None:
        self._check_restored()
        return group_logprobs(self.model, as_batch(step), self.temperature, self.ranks, self.device)

    @on_rank_group("every_rank")
    def compute_ref_logprobs(self, step: list[Sample] | Batch) -> torch.Tensor | None:
        """With LoRA, the reference policy: the base model, adapters switched off (no Reference actor)."""
        hit("reference.forward")
        self._check_restored()
        with adapters_disabled(self.model):
            return group_logprobs(self.model, as_batch(step), self.temperature, self.ranks, self.device)

    @on_rank_group("every_rank")
    def update(self, step: list[Sample] | Batch, **inputs) -> dict[str, float]:
        """One step's training from its samples: the Batch and its advantages (relay/update/batch.py,
        `inputs`: the reference's logprobs, the critic's values, old logprobs, kl_coef), then the update.
        Returns the update's metrics and the batch's (reward/mean, ...). A Batch already prepared by
        the caller (tests, benchmarks) is trained on as it is."""
        hit("learner.update")
        self._check_restored()
        if isinstance(step, Batch):
            return self._update(step)
        batch, metrics = prepare_batch(step, self.settings.algorithm, **inputs)
        if not batch.loss_mask.any():  # a batch of failures only (no loss token left) teaches nothing
            self.updates += 1  # the weights after this step are still the step's version
            return metrics
        return self._update(batch) | metrics  # with kl_in=reward its kl/mean is the step's

    @on_rank_group("every_rank")
    def supervised_update(self, samples: list[Sample]) -> dict[str, float]:
        """One step of the supervised stage (sft.*, relay/update/supervised.py) with its own AdamW."""
        if self.sft_optimizer is None:
            params = trainable_parameters(self.model)
            self.sft_optimizer = torch.optim.AdamW(params, lr=self.settings.sft.lr, fused=not self.ranks.sharded)
        batch = as_batch(samples).to(self.device)
        ranks = self.ranks
        return supervised_step(self.model, self.sft_optimizer, batch, self.training, ranks.rank, ranks.world_size)

    def _update(self, batch: Batch) -> dict[str, float]:
        """PPO epochs x mini-batches (one optimizer step each) x micro-batches (accumulated).
        Old logprobs not given come from here (relay/config/resolved.py: old_logprobs_source)."""
        start = time.perf_counter()
        batch = batch.to(self.device)
        if batch.old_logprobs is None and self.settings.old_logprobs != UPDATE_FORWARD:  # else _loss's own
            batch.old_logprobs = old_logprobs_before_update(self.model, batch, self.temperature, self.ranks.sharded)
        metrics = run_update(
            self.model,
            self.optimizer,
            batch,
            self._loss,
            self.training,
            seed=self.settings.seed,
            weight_by_tokens=self.settings.algorithm.loss_agg == "token-mean",
            scheduler=self.scheduler,
            rank=self.ranks.rank,
            world_size=self.ranks.world_size,
        )
        out = old_logprob_metrics(metrics)
        out |= {f"actor/{k}": v for k, v in metrics.items()}
        out[LEARNER_UPDATE_S] = self.update_seconds = time.perf_counter() - start
        self.updates += 1
        self.tokens_per_s = float(batch.loss_mask.sum()) / max(self.update_seconds, 1e-9)
        return out

    def _loss(self, micro: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        logprobs, entropy = response_logprobs(self.model, micro, self.temperature, with_entropy=True)
        old = logprobs.detach() if micro.old_logprobs is None else micro.old_logprobs
        loss, metrics = self.objective(
            logprobs=logprobs,
            entropy=entropy,
            old_logprobs=old,
            rollout_logprobs=micro.rollout_logprobs,
            ref_logprobs=micro.ref_logprobs,
            advantages=micro.advantages,
            loss_mask=micro.loss_mask,
        )
        return loss, metrics | old_logprob_stats(old, micro, self.settings.algorithm.kl_estimator)

    # -- checkpoints: state / load_state (one actor, safetensors groups) or save_shards / load_shards (DCP)

    @on_rank_group("not_on_group")
    def state(self, as_bytes: bool = False) -> tuple[dict[str, dict[str, torch.Tensor] | bytes], dict]:
        """Everything an exact resume needs: weights, optimizer, lr schedule, this process's RNG.
        `as_bytes`: each group as its safetensors file's bytes (the driver writes them without torch)."""
        hit("checkpoint.write")
        self._check_restored()
        opt_tensors, opt_skeleton = flatten_optimizer_state(self.optimizer.state_dict())
        opt_tensors = {k: v.to("cpu", copy=True) for k, v in opt_tensors.items()}  # a snapshot, not views of live state
        policy = {k: v.detach().to("cpu", copy=True) for k, v in trainable_state_dict(self.model).items()}
        meta = {
            "optimizer": opt_skeleton,
            "rng": capture_rng(),
            "updates": self.updates,
            "lr_schedule": self.scheduler.state_dict(),
        }
        groups = {"policy": policy, "optimizer": opt_tensors}
        return (group_bytes(groups) if as_bytes else groups), meta

    @on_rank_group("not_on_group")
    def load_state(self, groups: dict[str, dict[str, torch.Tensor]], meta: dict) -> None:
        load_trainable_state(self.model, groups["policy"])
        self.optimizer.load_state_dict(unflatten_optimizer_state(groups["optimizer"], meta["optimizer"]))
        if "lr_schedule" in meta:
            self.scheduler.load_state_dict(meta["lr_schedule"])
        restore_rng(meta["rng"])
        self.updates = meta.get("updates", 0)  # checkpoints written before it was saved: unknown, 0

    @on_rank_group("every_rank")
    def save_shards(self, folder: str) -> None:
        hit("checkpoint.write")
        extra = {"rng": capture_rng(), "lr_schedule": self.scheduler.state_dict(), "updates": self.updates}
        save_shards(folder, self.model, self.optimizer, extra)

    @on_rank_group("every_rank")
    def load_shards(self, folder: str) -> None:
        extra = load_shards(folder, self.model, self.optimizer)
        self.scheduler.load_state_dict(extra["lr_schedule"])
        restore_rng(extra["rng"])
        self.updates = extra.get("updates", 0)

    @on_rank_group("every_rank")
    def save_hf(self, folder: str, tokenizer_path: str) -> None:
        self._check_restored()
        from relay.checkpoint.atomic import save_hf_model
        from relay.models.loading import load_tokenizer

        tokenizer = load_tokenizer(tokenizer_path) if self.ranks.rank == 0 else None
        if self.settings.model.lora.rank:  # a peft adapter folder (+ merged/): every rank gathers, rank 0 writes
            writer = final_folder_writer(self.model, self.settings.save_merged, tokenizer, self.ranks.rank == 0)
            if writer is not None:
                save_hf_model(writer, None, folder)
        elif self.ranks.sharded:
            save_hf_sharded(self.model, folder, tokenizer)
        else:
            save_hf_model(self.model, tokenizer, folder)
