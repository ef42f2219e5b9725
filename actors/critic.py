"""Critic: a value model for PPO/GAE, on its own pool, with its own optimizer and checkpoint state.

The value model is the policy architecture with a scalar head (transformers' token
classification head with one label: a linear layer on the last hidden state), initialised
from the policy's weights or from `critic.model_path`.
"""
from __future__ import annotations

import time

import numpy as np
import torch
import transformers
from transformers import AutoModelForTokenClassification

from relay.algos import value_loss
from relay.checkpoint import flatten_optimizer_state, unflatten_optimizer_state
from relay.config import Config
from relay.models.loading import DTYPES, actor_device
from relay.types import Batch


class Critic:
    def __init__(self, cfg: Config, model_path: str, num_threads: int):
        torch.set_num_threads(num_threads)
        torch.manual_seed(cfg.run.seed + 1)
        self.cfg = cfg
        c = cfg.critic
        transformers.utils.logging.set_verbosity_error()  # the new value head's "newly initialized" notice is expected
        self.model = AutoModelForTokenClassification.from_pretrained(
            c.model_path or model_path, num_labels=1, dtype=DTYPES[cfg.model.dtype], trust_remote_code=cfg.model.trust_remote_code)
        self.device = actor_device()
        self.model.to(self.device)
        # Dropout off (gradients still flow): with it, logprobs/values recomputed on the same weights
        # differ run to run, so PPO ratios and exact resume break.
        self.model.eval()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=c.lr, weight_decay=c.weight_decay)

    def _values(self, batch: Batch) -> torch.Tensor:
        """V(state before each response token): [B,R], read at the same columns as the policy's logits."""
        out = self.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids)
        P, R = batch.prompt_width, batch.responses.shape[1]
        return out.logits[:, P - 1:P - 1 + R, 0].float()

    @torch.no_grad()
    def compute_values(self, batch: Batch) -> torch.Tensor:
        batch = batch.to(self.device)
        return (self._values(batch) * batch.loss_mask).cpu()

    def update(self, batch: Batch) -> dict[str, float]:
        """Clipped value loss against the returns, same epochs/mini/micro-batching as the learner."""
        t, c = self.cfg.training, self.cfg.critic
        start, history = time.perf_counter(), {}
        batch = batch.to(self.device)
        for _ in range(t.ppo_epochs):
            for mini_idx in torch.arange(len(batch)).chunk(t.mini_batches):
                mini = batch.select(mini_idx)
                tokens = mini.loss_mask.sum().clamp(min=1)
                self.optimizer.zero_grad(set_to_none=True)
                for micro_idx in torch.arange(len(mini)).split(t.micro_batch_size):
                    micro = mini.select(micro_idx)
                    loss, metrics = value_loss(self._values(micro), micro.extras["values"], micro.extras["returns"],
                                               micro.loss_mask, clip_range=c.clip_range, agg_mode="token-mean")
                    (loss * micro.loss_mask.sum() / tokens).backward()
                    history.setdefault("critic/vf_loss", []).append(float(loss.detach()))
                    for k, v in metrics.items():
                        history.setdefault(f"critic/{k}", []).append(float(v))
                grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), t.grad_clip)
                self.optimizer.step()
                history.setdefault("critic/grad_norm", []).append(float(grad_norm))
        out = {k: float(np.mean(v)) for k, v in history.items()}
        out["time/critic_update_s"] = time.perf_counter() - start
        return out

    def state(self) -> tuple[dict[str, dict[str, torch.Tensor]], dict]:
        tensors, skeleton = flatten_optimizer_state(self.optimizer.state_dict())
        tensors = {k: v.to("cpu", copy=True) for k, v in tensors.items()}  # a snapshot, not views of live state
        weights = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
        return {"critic": weights, "critic_optimizer": tensors}, {"optimizer": skeleton}

    def load_state(self, groups: dict[str, dict[str, torch.Tensor]], meta: dict) -> None:
        self.model.load_state_dict(groups["critic"], strict=False)
        self.optimizer.load_state_dict(unflatten_optimizer_state(groups["critic_optimizer"], meta["optimizer"]))
