"""The default engine: Hugging Face transformers `generate`, dependency-light, runs anywhere.

Logprobs are taken from the raw logits (before top-p/top-k processing) at the sampling
temperature, the same quantity the learner recomputes, so step-0 agreement is exact up to
floating-point noise. The top-k alternatives (SamplingParams.top_logprobs) are read from the same
log-softmax, only when asked for: the sampled tokens and their logprobs do not change.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import lru_cache

import torch
from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

from relay.engines.base import Completion, SamplingParams, Weights, named_items
from relay.engines.hf_prefill import (
    MIN_SHARED_PREFIX,
    answered_prefill,
    generation_module,
    prefix_layout,
    shared_prefill,
    shared_prefix_length,
)
from relay.engines.hf_sampling import InverseCdfSampler
from relay.models.loading import actor_device, load_model, load_tokenizer
from relay.weights.transfer import as_tensor

GENERATE_CHUNK = 256  # rows per generate call: bounds the KV-cache memory
# tokens per generate call (rows x (longest prompt + new tokens)): 192 BFCL rows of about 1,100 tokens
# held 20 GB in one call of SmolLM2-135M; its float32 KV cache for 65,536 tokens is 3 GB
GENERATE_TOKENS = 65536


def rows_per_call(prompts: list[list[int]], max_tokens: int) -> int:
    """How many rows one generate call takes: GENERATE_CHUNK, fewer where long rows would pass GENERATE_TOKENS."""
    longest = max((len(p) for p in prompts), default=0) + max_tokens
    return max(1, min(GENERATE_CHUNK, GENERATE_TOKENS // max(longest, 1)))


def call_blocks(prompts: list[list[int]], max_tokens: int, by_length: bool) -> list[list[int]]:
    """The row indices of each generate call. A call pads every row to its longest, and the padding
    is computed like any token: by_length sorts the rows by length into as many calls as their
    order would take, of equal size (192 held-out BFCL prompts of 210-799 tokens: 97k prefill
    tokens against 121k in their order). Otherwise the rows keep their order: a sampled call draws
    its random numbers row by row, so a seed keeps giving the same samples."""
    rows = rows_per_call(prompts, max_tokens)
    order = list(range(len(prompts)))
    if by_length and rows < len(prompts):
        order.sort(key=lambda i: len(prompts[i]))
        calls = math.ceil(len(prompts) / rows)  # as many as in order, so none holds more tokens than then
        rows = math.ceil(len(prompts) / calls)
    return [order[start : start + rows] for start in range(0, len(prompts), rows)]


@lru_cache(maxsize=64)
def generation_config(max_tokens: int, eos_ids: tuple[int, ...], pad_id: int, stop: tuple) -> GenerationConfig:
    """generate's settings, built once per distinct set: given its settings as a config, generate
    no longer rebuilds them from the model's config on every call (about 1 ms a call on this CPU, a
    few % of a tiny model's rollout). Unset fields take the model's generation config and then
    transformers' defaults, as generate's own keyword arguments would. Always greedy: a sampled
    rollout draws its tokens in `sampler` (relay/engines/hf_sampling.py)."""
    return GenerationConfig(
        max_new_tokens=max_tokens,
        do_sample=False,
        eos_token_id=list(eos_ids),
        pad_token_id=pad_id,
        output_logits=True,
        return_dict_in_generate=True,
        stop_strings=list(stop) or None,
    )


def sampler(sampling: SamplingParams) -> list[InverseCdfSampler]:
    """generate's last logits processor: the draw at the sampling's temperature, top-k (0: off)
    and top-p; none at temperature 0 (greedy)."""
    if sampling.temperature == 0:
        return []
    return [InverseCdfSampler(sampling.temperature, max(sampling.top_k, 0), sampling.top_p)]


class HFEngine:
    max_top_logprobs = 20  # SamplingParams.top_logprobs: any k works; 20 is OpenAI's limit

    def __init__(
        self,
        model_path: str,
        dtype: str = "float32",
        tokenizer_path: str | None = None,
        trust_remote_code: bool = False,
        share_prefill: bool = True,
        attn_implementation: str | None = None,
        **engine_kwargs,
    ):
        self.tokenizer = load_tokenizer(tokenizer_path or model_path, trust_remote_code)
        self.device = actor_device()
        model = load_model(model_path, dtype, trust_remote_code, attn_implementation=attn_implementation)
        self.model = model.to(self.device).eval()
        self.generate_kwargs = engine_kwargs  # passed to model.generate untouched (its settings via its config)
        # rows with the same prompt (a GRPO group) prefill it once (relay/engines/hf_prefill.py); False:
        # generate prefills every row, as a reference for tests and benchmarks
        self.share_prefill = share_prefill
        self._version = 0

    @classmethod
    def sharing(cls, model: torch.nn.Module, tokenizer, share_prefill: bool = True, **engine_kwargs) -> HFEngine:
        """An engine that generates from `model` itself, the learner's module (resources.colocate):
        no copy of the weights, so a weight sync is only `set_weight_version`. The caller keeps the
        module in eval mode (the learner does: dropout off) and the RNG out of its way."""
        engine = cls.__new__(cls)
        engine.tokenizer, engine.model, engine.generate_kwargs, engine._version = tokenizer, model, engine_kwargs, 0
        engine.share_prefill = share_prefill
        engine.device = next(model.parameters()).device
        return engine

    def set_weight_version(self, version: int) -> None:
        """A shared module (`sharing`) holds the trained weights already: a sync only tags them."""
        self._version = version

    @property
    def weight_version(self) -> int:
        return self._version

    @torch.no_grad()
    def generate(
        self,
        prompt_token_ids: list[list[int]],
        sampling: SamplingParams,
        *,
        chunk: int = 0,
        between: Callable[[], None] | None = None,
    ) -> list[list[Completion]]:
        """chunk > 0 (rollout.partial): each block of rows is generated `chunk` new tokens at a time,
        each chunk one generate continuing from the ids so far, and `between()` runs between two
        chunks (it may load new weights: every token then records the version that sampled it)."""
        if sampling.seed is not None:  # on CPU only the CPU generator: torch.manual_seed seeds every backend too (ms)
            (torch.random.default_generator if self.device.type == "cpu" else torch).manual_seed(sampling.seed)
        flat = [ids for ids in prompt_token_ids for _ in range(sampling.n)]
        out: list[Completion] = [None] * len(flat)  # type: ignore[list-item]
        for rows in call_blocks(flat, sampling.max_tokens, by_length=sampling.temperature == 0):
            block = [flat[i] for i in rows]
            done = self._chunked(block, sampling, chunk, between) if chunk > 0 else self._block(block, sampling)
            for i, completion in zip(rows, done):
                out[i] = completion
        return [out[i * sampling.n : (i + 1) * sampling.n] for i in range(len(prompt_token_ids))]

    def _block(self, prompts: list[list[int]], sampling: SamplingParams) -> list[Completion]:
        stop_ids = {self.tokenizer.eos_token_id, *sampling.stop_token_ids}
        tokens, logprobs, top = self._generate_raw(prompts, sampling, stop_ids)
        return [self._cut(t, lp, stop_ids, sampling, top=k) for t, lp, k in zip(tokens, logprobs, top)]

    def _chunked(
        self, prompts: list[list[int]], sampling: SamplingParams, chunk: int, between: Callable[[], None] | None
    ) -> list[Completion]:
        """One block, `chunk` new tokens per generate. Rows that finished stay in the batch (and stop
        at once): the batch keeps its shape, so the sampler draws the same random numbers as in one
        generate, and a fixed seed gives the same tokens (up to the floating-point noise of
        re-reading the prefix instead of a KV cache)."""
        stop_ids = {self.tokenizer.eos_token_id, *sampling.stop_token_ids}
        tokens: list[list[int]] = [[] for _ in prompts]
        logprobs: list[list[float]] = [[] for _ in prompts]
        top: list[list | None] = [[] if sampling.top_logprobs else None for _ in prompts]
        versions: list[list[int]] = [[] for _ in prompts]
        done: list[Completion | None] = [None] * len(prompts)
        generated = 0
        while True:
            steps, version = min(chunk, sampling.max_tokens - generated), self._version
            finished = [d is not None for d in done]
            ids = [p + t for p, t in zip(prompts, tokens)]
            new, new_lp, new_top = self._generate_raw(ids, replace(sampling, max_tokens=steps), stop_ids, finished)
            generated += steps
            for i in (i for i, f in enumerate(finished) if not f):
                start = len(tokens[i])
                tokens[i] += new[i]
                logprobs[i] += new_lp[i]
                if top[i] is not None:
                    top[i] += new_top[i]
                c = self._cut(tokens[i], logprobs[i], stop_ids, sampling, start, top[i])
                if c.finish_reason == "stop" or generated >= sampling.max_tokens:
                    versions[i] += [version] * (len(c.token_ids) - start)
                    done[i] = replace(c, versions=versions[i])
                else:
                    versions[i] += [version] * len(new[i])
            if all(d is not None for d in done):
                return done  # type: ignore[return-value]
            if between is not None:
                between()

    def _generate_raw(
        self,
        prompts: list[list[int]],
        sampling: SamplingParams,
        stop_ids: set[int],
        finished: list[bool] | None = None,
    ) -> tuple[list[list[int]], list[list[float]], list]:
        """Each row's new tokens (padded after its end), their logprobs, and per token its top
        sampling.top_logprobs alternatives (None per row when 0), from one model.generate."""
        pad = self.tokenizer.pad_token_id
        prefix = shared_prefix_length(prompts) if self.share_prefill else 0
        prefix = prefix if prefix >= MIN_SHARED_PREFIX else 0
        if prefix:
            ids, mask = prefix_layout(prompts, prefix, pad)
        else:  # left padding
            width = max(map(len, prompts))
            ids = [[pad] * (width - len(p)) + p for p in prompts]
            mask = [[0] * (width - len(p)) + [1] * len(p) for p in prompts]
        width = len(ids[0])
        input_ids = torch.tensor(ids, device=self.device)
        attention_mask = torch.tensor(mask, device=self.device)
        greedy = sampling.temperature == 0
        config = generation_config(sampling.max_tokens, tuple(sorted(stop_ids)), pad, tuple(sampling.stop))
        kwargs = {}
        if self.generate_kwargs:  # rollout.engine_kwargs: generate's settings join its config, the rest go as they are
            config = copy.deepcopy(config)
            kwargs = config.update(**self.generate_kwargs)
        generator = generation_module(self.model)
        prefill = None
        if self.share_prefill:
            prefill = shared_prefill(generator, config, kwargs, prompts, input_ids, attention_mask, prefix)
        if prefill is not None:  # generate decodes on from the shared prefill's cache
            kwargs["past_key_values"] = prefill.past_key_values
        if sampling.stop:
            kwargs["tokenizer"] = self.tokenizer
        if finished is not None and any(finished):
            kwargs.update(stopping_criteria=StoppingCriteriaList([_Finished(finished)]))
        with answered_prefill(generator, prefill):
            result = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                generation_config=config,
                logits_processor=LogitsProcessorList([*kwargs.pop("logits_processor", []), *sampler(sampling)]),
                **kwargs,
            )
        new_tokens = result.sequences[:, width:]  # [N, T]
        logits = torch.stack(result.logits, dim=1).float()  # [N, T, V] raw, before processors
        logprobs = torch.log_softmax(logits / (sampling.temperature if not greedy else 1.0), dim=-1)
        token_logprobs = logprobs.gather(-1, new_tokens.unsqueeze(-1)).squeeze(-1)
        top: list = [None] * len(prompts)
        if sampling.top_logprobs:  # the same tensor the sampled logprob is read from, so they agree
            values, ids = logprobs.topk(min(sampling.top_logprobs, logprobs.shape[-1]), dim=-1)  # [N, T, k]
            top = [
                [list(zip(i, v)) for i, v in zip(row_ids, row_values)]
                for row_ids, row_values in zip(ids.tolist(), values.tolist())
            ]
        return new_tokens.tolist(), token_logprobs.tolist(), top

    def _cut(
        self,
        tokens: list[int],
        logprobs: list[float],
        stop_ids: set[int],
        sampling: SamplingParams,
        start: int = 0,
        top: list | None = None,
    ) -> Completion:
        """Trim the padding generate adds after a finished row; keep the stop token itself. Tokens
        before `start` are known not to end the row (an earlier chunk's)."""
        end, reason = len(tokens), "length"
        for t in range(start, len(tokens)):
            if tokens[t] in stop_ids:
                end, reason = t + 1, "stop"
                break
            if sampling.stop:  # the first token whose text so far holds a stop string (vLLM's rule: a
                # token may carry text past it, and the text is kept)
                text = self.tokenizer.decode(tokens[: t + 1])
                if any(s in text for s in sampling.stop):
                    end, reason = t + 1, "stop"
                    break
        return Completion(tokens[:end], logprobs[:end], reason, top_logprobs=None if top is None else top[:end])

    def update_weights(self, weights: Weights, version: int) -> None:
        load_named_tensors(self.model, weights)
        self._version = version

    def sleep(self) -> None:  # the HF engine keeps no KV cache between calls
        pass

    def wake(self) -> None:
        pass

    def shutdown(self) -> None:  # nothing runs beside the model, which goes with the engine
        pass


@torch.no_grad()
def load_named_tensors(model: torch.nn.Module, weights: Weights) -> None:
    """Copy tensors (or read-only numpy arrays from the object store) into the model in place,
    one at a time as they come (a stream is read once)."""
    params = model.state_dict()  # shares storage with the parameters; tied weights appear under both names
    if isinstance(weights, Mapping) and (missing := [name for name in weights if name not in params]):
        raise KeyError(f"weights for unknown parameters: {missing[:5]}")  # before anything changes
    for name, value in named_items(weights):
        if name not in params:
            raise KeyError(f"weights for an unknown parameter: {name}")
        params[name].copy_(as_tensor(value))


class _Finished(StoppingCriteria):
    """Rows that ended in an earlier chunk: done at the first step (they stay in the batch only to
    keep its shape)."""

    def __init__(self, finished: list[bool]):
        self.finished = torch.tensor(finished)

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        return self.finished.to(input_ids.device)
