"""SGLang engine: the Engine protocol on `sglang.Engine` (GPU only; CUDA wheels).

Importing this module never needs SGLang; constructing the engine without it raises an
ImportError naming the extra to install.

Logprobs. With `return_logprob=True` SGLang reports, for sampled requests, log(softmax(logits / T))
taken before top-k/top-p/min-p (the sampler divides by T, takes the softmax, samples from a
truncated copy, and logs the untruncated probabilities), and for greedy requests
log_softmax(logits), i.e. T=1: exactly relay's contract and what HFEngine reports. The
environment variable SGLANG_RETURN_ORIGINAL_LOGPROB=1 switches SGLang to T=1 logprobs for all
requests; the engine warns if it is set.

Weights. `update_weights_from_tensor` (the colocated path: tensors staged on this GPU in bounded
buckets, handed over by CUDA IPC, KV/radix cache flushed after the last bucket).

Memory. sleep()/wake() are `release_memory_occupation()`/`resume_memory_occupation()`, which
need SGLang's memory saver (`enable_memory_saver=True`; relay turns it on by default where the
`torch_memory_saver` package is installed). Without it they are no-ops.

Seeds. SamplingParams.seed goes to SGLang's per-request `sampling_seed`; SGLang honours it
when the engine runs with `enable_deterministic_inference=True` (pass it in engine_kwargs).
"""

from __future__ import annotations

import importlib.util
import os
import warnings
from collections.abc import Callable
from typing import Any

import torch

from relay.engines.base import Completion, SamplingParams, Weights, named_items
from relay.models.loading import load_tokenizer
from relay.weights.transfer import as_tensor

INSTALL_HINT = "pip install 'relay[sglang]' (needs a CUDA GPU)"
BUCKET_BYTES = 512 << 20  # weights staged on the GPU per update call


def default_engine_kwargs() -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    if importlib.util.find_spec("torch_memory_saver") is not None:
        kwargs["enable_memory_saver"] = True
    return kwargs


class SGLangEngine:
    def __init__(
        self,
        model_path: str,
        dtype: str = "float32",
        tokenizer_path: str | None = None,
        trust_remote_code: bool = False,
        **engine_kwargs,
    ):
        try:
            import sglang
        except ImportError as e:
            raise ImportError(f"rollout.engine=sglang needs SGLang: {INSTALL_HINT}") from e
        if os.environ.get("SGLANG_RETURN_ORIGINAL_LOGPROB", "").lower() in ("1", "true"):
            warnings.warn(
                "SGLANG_RETURN_ORIGINAL_LOGPROB is set: SGLang reports T=1 logprobs, not "
                "log_softmax(logits / T) as the learner computes them",
                stacklevel=2,
            )
        kwargs = {
            "model_path": str(model_path),
            "tokenizer_path": str(tokenizer_path or model_path),
            "dtype": dtype,
            "trust_remote_code": trust_remote_code,
            **default_engine_kwargs(),
            **engine_kwargs,
        }
        self.tokenizer = load_tokenizer(str(tokenizer_path or model_path), trust_remote_code)
        self.engine = sglang.Engine(**kwargs)
        self.memory_saver = bool(kwargs.get("enable_memory_saver", False))
        self.dtype = getattr(torch, {"float": "float32", "half": "float16"}.get(dtype, dtype), torch.float32)
        self._version = 0
        self._asleep = False

    @property
    def weight_version(self) -> int:
        return self._version

    def generate(
        self,
        prompt_token_ids: list[list[int]],
        sampling: SamplingParams,
        *,
        chunk: int = 0,
        between: Callable[[], None] | None = None,
    ) -> list[list[Completion]]:
        if chunk > 0:  # its registry record has no partial_rollouts: the config check refuses rollout.partial
            raise ValueError("the sglang engine cannot generate in chunks (rollout.partial)")
        if sampling.top_logprobs:  # no max_top_logprobs: the endpoint refuses top_logprobs > 0 with a 400 first
            raise ValueError("the sglang engine returns the sampled token's logprob only (top_logprobs must be 0)")
        if not prompt_token_ids:
            return []
        if self._asleep:
            self.wake()
        n = sampling.n
        # One request per sample (prefix caching shares the prompt), so each has its own seed.
        flat = [list(ids) for ids in prompt_token_ids for _ in range(n)]
        params = [self._params(sampling, k) for k in range(len(flat))]
        outputs = self.engine.generate(input_ids=flat, sampling_params=params, return_logprob=True)
        completions = [to_completion(o) for o in outputs]
        return [completions[i * n : (i + 1) * n] for i in range(len(prompt_token_ids))]

    def _params(self, s: SamplingParams, index: int) -> dict[str, Any]:
        params: dict[str, Any] = {
            "max_new_tokens": s.max_tokens,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "top_k": s.top_k if s.top_k > 0 else -1,
            "stop_token_ids": sorted({self.tokenizer.eos_token_id, *s.stop_token_ids} - {None}),
            "no_stop_trim": True,  # keep the matched stop string, as the contract says
            "skip_special_tokens": False,
        }
        if s.stop:
            params["stop"] = list(s.stop)
        if s.seed is not None:
            params["sampling_seed"] = (s.seed + index) % 2**63
        return params

    def update_weights(self, weights: Weights, version: int) -> None:
        if self._asleep:
            self.wake()
        # A full bucket waits until the next tensor arrives, so the one sent last is never empty;
        # it carries flush_cache=True (the KV cache was computed by the old weights).
        bucket: list[tuple[str, torch.Tensor]] = []
        pending: list[list[tuple[str, torch.Tensor]]] = []
        size = 0
        for name, value in named_items(weights):
            t = as_tensor(value).to("cuda", self.dtype, non_blocking=True)
            bucket.append((name, t))
            size += t.numel() * t.element_size()
            if size >= BUCKET_BYTES:
                for full in pending:
                    self._send_bucket(full, flush_cache=False)
                pending, bucket, size = [bucket], [], 0
        chunks = pending + ([bucket] if bucket else [])
        for i, chunk in enumerate(chunks):
            self._send_bucket(chunk, flush_cache=i == len(chunks) - 1)
        torch.cuda.empty_cache()
        self._version = version

    def _send_bucket(self, bucket: list[tuple[str, torch.Tensor]], flush_cache: bool) -> None:
        torch.cuda.synchronize()
        result = self.engine.update_weights_from_tensor(bucket, flush_cache=flush_cache)
        ok, message = (result[0], result[1]) if isinstance(result, tuple) else (True, "")
        if not ok:
            raise RuntimeError(f"sglang update_weights_from_tensor failed: {message}")

    def sleep(self) -> None:
        if self.memory_saver and not self._asleep:
            self.engine.release_memory_occupation()
            self._asleep = True

    def wake(self) -> None:
        if self._asleep:
            self.engine.resume_memory_occupation()
            self._asleep = False

    def shutdown(self) -> None:
        self.engine.shutdown()


def to_completion(output: dict) -> Completion:
    meta = output["meta_info"]
    token_ids = [int(t) for t in output["output_ids"]]
    logprobs = [float(entry[0]) for entry in meta["output_token_logprobs"]]
    if len(logprobs) != len(token_ids):
        raise RuntimeError(f"sglang returned {len(logprobs)} logprobs for {len(token_ids)} tokens")
    reason = meta["finish_reason"]
    kind = reason.get("type") if isinstance(reason, dict) else reason
    if kind not in ("stop", "length"):
        raise RuntimeError(f"sglang finished a request with {reason!r}")
    return Completion(token_ids, logprobs, kind)
