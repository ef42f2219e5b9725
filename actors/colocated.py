"""The learner and the rollout worker in one actor, generating from one module (resources.colocate).

verl's "hybrid engine", the Ray-native way: the actor holds a Learner and a RolloutWorker whose
engine is built around the learner's own module (`sharing`, relay.engines.base.SharingEngine: the
engines whose registry record has colocate; the HF engine). Per step that saves the
weight copy into a second model, a second process holding that model and torch, and the round
trips of the weight sync: the update tags the module's weights with their new version, and the
driver's sync phase makes no call. `actors.rollout = [this]` and `actors.learner = this`, and each
method below is the Learner's or the RolloutWorker's of the same name, so the driver calls them as
it calls separate actors; `rollout_and_update` makes a plain sync step one call instead of two.

Only where the phases never overlap: training.mode sync, such an engine, one rollout worker,
one learner actor (relay/config/validate.py says so, naming the key, before any actor starts).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import torch

from actors.learner import Learner
from actors.plumbing import RelayActor, peak_rss_mb
from actors.rollout import RolloutWorker
from actors.supervision import ATTEMPTS_PER_CALL
from relay.config.role_settings import ColocatedSettings
from relay.endpoint.fence import FencedEngine
from relay.engines import engine_class
from relay.engines.base import SharingEngine
from relay.envs.scoring import trainable
from relay.failures import raised_line
from relay.fault_points import hit
from relay.models.loading import load_tokenizer
from relay.run.metric_keys import ROLLOUT_S, UPDATE_S
from relay.types import Batch, Sample


class ColocatedWorker(RelayActor):
    repr_format = "{learner!r}, {worker!r}"  # actors/plumbing.py
    learner, worker = None, None

    def __init__(
        self,
        settings: ColocatedSettings,
        model_path: str,
        num_threads: int,
        env_pool=None,
        tool_executors: list | None = None,
        endpoint_token: str | None = None,
    ):
        self.learner = Learner(settings.policy, model_path, num_threads)  # eval mode: dropout off
        m, e = settings.policy.model, settings.rollout.engine
        tokenizer = load_tokenizer(m.tokenizer_path or model_path, m.trust_remote_code)
        cls: type[SharingEngine] = engine_class(e.engine)  # its record has colocate (validated)
        engine = cls.sharing(self.learner.model, tokenizer, **e.engine_kwargs)
        self.worker = RolloutWorker(
            settings.rollout, model_path, 0, num_threads, env_pool, tool_executors, endpoint_token, engine=engine
        )
        cuda = self.learner.device.type == "cuda"
        self.rng_devices = [self.learner.device] if cuda else []

    # -- rollout: the RolloutWorker's calls

    def rollout(
        self, rows: list[dict[str, Any]], step: int, first_group_id: int, greedy: bool = False
    ) -> tuple[list[Sample], dict[str, float]]:
        self.learner._check_restored()  # a replacement generates from the model path's weights
        # The engine seeds the global RNG for each generate (reproducible samples); the learner's
        # stream must go on as if no rollout ran here, so its checkpointed RNG resumes exactly.
        # Under training.mixed_precision one bf16 context around the whole rollout: its generate
        # calls cast the float32 weights once per call, not once per decoded token
        # (relay/update/precision.py); a LoRA model's generate skips the wrapped forward, not this.
        with torch.random.fork_rng(devices=self.rng_devices), self.learner.precision():
            return self.worker.rollout(rows, step, first_group_id, greedy)

    def encode_prompt(self, row: dict[str, Any]) -> list[int]:
        return self.worker.encode_prompt(row)

    def sleep(self) -> None:  # nothing to free: the module is the learner's, and it trains next
        pass

    def weight_version(self) -> int:
        return self.worker.engine.weight_version

    def use_trained_weights(self, version: int) -> None:
        """The engine already generates from the trained module; tag its weights `version`."""
        hit("weights.load.colocated")
        self.worker.engine.set_weight_version(version)
        self.worker.weights_version = version

    # -- training: the Learner's calls

    def module_in_use(self):
        """Around the learner's calls on the shared module: with an endpoint served, no request is
        generated from it while it trains or is read (its weights change in place; a LoRA reference
        turns the adapters off) and the version is retagged (relay/endpoint/fence.py)."""
        engine = self.worker.engine
        return engine.fence.loading_weights() if isinstance(engine, FencedEngine) else contextlib.nullcontext()

    def update(self, step: list[Sample] | Batch, **inputs) -> dict[str, float]:
        """The learner's update; the weight sync is part of it: the engine's weights are the
        learner's own, tagged with the learner's version (the driver's sync makes no call)."""
        with self.module_in_use():
            metrics = self.learner.update(step, **inputs)
            self.use_trained_weights(self.learner.updates)
        return metrics

    def rollout_and_update(
        self, rows: list[dict[str, Any]], step: int, kl_coef: float
    ) -> tuple[list[Sample], dict[str, float], dict[str, float], dict[str, float]]:
        """A sync step in one call, where nothing needs the samples between the rollout and the
        update (relay_trainer/steps.py: OneCall): the rollout, then the update on its trainable samples,
        as separate calls do it. One round trip instead of two; the samples cross once.
        Returns the samples as scored (the driver logs and checks them), the rollout's metrics,
        the update's, and the seconds of both phases, timed here."""
        start = time.perf_counter()
        samples, rollout_metrics = self._rollout_redone(rows, step)
        rolled = time.perf_counter()
        update_metrics = self.update(trainable(samples), kl_coef=kl_coef)
        seconds = {ROLLOUT_S: rolled - start, UPDATE_S: time.perf_counter() - rolled}
        return samples, rollout_metrics, update_metrics, seconds

    def _rollout_redone(self, rows: list[dict[str, Any]], step: int) -> tuple[list[Sample], dict[str, float]]:
        """The one-call step's rollout; one that raised is redone here, up to ATTEMPTS_PER_CALL times
        in all, as the driver redoes a rollout worker's raising shard: nothing was trained yet and
        the seed is the same. The redos are counted in the metrics' faults/* (the driver adds them)."""
        for attempt in range(1, ATTEMPTS_PER_CALL + 1):
            try:
                samples, metrics = self.rollout(rows, step, first_group_id=0)
            except Exception as e:
                if attempt == ATTEMPTS_PER_CALL:
                    raise
                print(f"relay: fault: the step's rollout raised {raised_line(e)}; redoing it", flush=True)
                continue
            redone = float(attempt - 1)
            return samples, {**metrics, "faults/call_errors": redone, "faults/retried_calls": redone}

    def supervised_update(self, samples: list[Sample]) -> dict[str, float]:
        with self.module_in_use():
            return self.learner.supervised_update(samples)  # the engine generates from this very module

    def encode_conversations(self, conversations: list[list[dict]]) -> list[Sample]:
        return self.worker.encode_conversations(conversations)

    def compute_logprobs(self, step: list[Sample] | Batch) -> torch.Tensor | None:
        with self.module_in_use():
            return self.learner.compute_logprobs(step)

    def compute_ref_logprobs(self, step: list[Sample] | Batch) -> torch.Tensor | None:
        with self.module_in_use():
            return self.learner.compute_ref_logprobs(step)

    def state(self, as_bytes: bool = False) -> tuple[dict[str, dict[str, torch.Tensor] | bytes], dict]:
        return self.learner.state(as_bytes)

    def load_state(self, groups: dict[str, dict[str, torch.Tensor]], meta: dict) -> None:
        with self.module_in_use():
            self.learner.load_state(groups, meta)
            self.use_trained_weights(self.learner.updates)

    def restore(self, groups: dict[str, bytes] | None, meta: dict | None) -> int:
        with self.module_in_use():
            version = self.learner.restore(groups, meta)
            self.use_trained_weights(version)
        return version

    @property
    def needs_restore(self) -> bool:
        return self.learner.needs_restore

    def save_hf(self, folder: str, tokenizer_path: str) -> None:
        self.learner.save_hf(folder, tokenizer_path)

    # -- both

    def peak_memory_mb(self) -> float:
        return peak_rss_mb()
