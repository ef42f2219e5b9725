"""Critic: a value model for PPO/GAE, on its own pool, with its own optimizer and checkpoint state.

The value model is the policy architecture with a scalar head (transformers' token
classification head with one label: a linear layer on the last hidden state), initialised
from the policy's weights or from `critic.model_path`.
"""

from __future__ import annotations

import time

import torch
import transformers
from transformers import AutoModelForTokenClassification

from relay.algos import value_loss
from relay.checkpoint import flatten_optimizer_state, unflatten_optimizer_state
from relay.config import Config
from relay.models.loading import DTYPES, actor_device
from relay.policy import response_values
from relay.types import Batch
from relay.update_loop import run_update


class Critic:
    updates, tokens_per_s, update_seconds = 0, 0.0, None  # __repr__'s fields; see RolloutWorker

    def __init__(self, cfg: Config, model_path: str, num_threads: int):
        torch.set_num_threads(num_threads)
        torch.manual_seed(cfg.run.seed + 1)
        self.cfg = cfg
        c = cfg.critic
        transformers.utils.logging.set_verbosity_error()  # the new value head's "newly initialized" notice is expected
        self.model = AutoModelForTokenClassification.from_pretrained(
            c.model_path or model_path,
            num_labels=1,
            dtype=DTYPES[cfg.model.dtype],
            trust_remote_code=cfg.model.trust_remote_code,
        )
        self.device = actor_device()
        self.model.to(self.device)
        # Dropout off (gradients still flow): with it, logprobs/values recomputed on the same weights
        # differ run to run, so PPO ratios and exact resume break.
        self.model.eval()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=c.lr, weight_decay=c.weight_decay)
        # What __repr__ reports: plain attributes set where the work happens (see Learner).
        self.updates, self.tokens_per_s, self.update_seconds = 0, 0.0, None

    @torch.no_grad()
    def compute_values(self, batch: Batch) -> torch.Tensor:
        batch = batch.to(self.device)
        return (response_values(self.model, batch) * batch.loss_mask).cpu()

    def update(self, batch: Batch) -> dict[str, float]:
        """Clipped value loss against the returns, with the learner's epochs, shuffled mini-batches
        (the same order: same seed rule) and token-weighted micro-batches (relay/update_loop.py)."""
        start = time.perf_counter()
        metrics = run_update(
            self.model,
            self.optimizer,
            batch.to(self.device),
            self._loss,
            self.cfg.training,
            seed=self.cfg.run.seed,
            weight_by_tokens=True,
        )
        out = {f"critic/{k}": v for k, v in metrics.items()}
        out["time/critic_update_s"] = self.update_seconds = time.perf_counter() - start
        self.updates += 1
        self.tokens_per_s = float(batch.loss_mask.sum()) / max(self.update_seconds, 1e-9)
        return out

    def __repr__(self) -> str:
        last = "no update yet" if self.update_seconds is None else f"last update {self.update_seconds:.2f} s"
        return f"Critic(critic-0, step {self.updates}, {self.tokens_per_s:.0f} tok/s, {last})"

    def _loss(self, micro: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        loss, metrics = value_loss(
            response_values(self.model, micro),
            micro.values,
            micro.returns,
            micro.loss_mask,
            clip_range=self.cfg.critic.clip_range,
            agg_mode="token-mean",
        )
        return loss, {"vf_loss": float(loss.detach()), **{k: float(v) for k, v in metrics.items()}}

    def state(self) -> tuple[dict[str, dict[str, torch.Tensor]], dict]:
        tensors, skeleton = flatten_optimizer_state(self.optimizer.state_dict())
        tensors = {k: v.to("cpu", copy=True) for k, v in tensors.items()}  # a snapshot, not views of live state
        weights = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
        return {"critic": weights, "critic_optimizer": tensors}, {"optimizer": skeleton, "updates": self.updates}

    def load_state(self, groups: dict[str, dict[str, torch.Tensor]], meta: dict) -> None:
        self.model.load_state_dict(groups["critic"], strict=True)
        self.optimizer.load_state_dict(unflatten_optimizer_state(groups["critic_optimizer"], meta["optimizer"]))
        self.updates = meta.get("updates", 0)
