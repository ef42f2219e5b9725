"""The default engine: Hugging Face transformers `generate`, dependency-light, runs anywhere.

Logprobs are taken from the raw logits (before top-p/top-k processing) at the sampling
temperature, the same quantity the learner recomputes, so step-0 agreement is exact up to
floating-point noise.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from relay.engines.base import Completion, SamplingParams, Weights, as_tensor, named_items
from relay.models.loading import actor_device, load_model, load_tokenizer

GENERATE_CHUNK = 256  # rows per generate call: bounds the KV-cache memory


class HFEngine:
    def __init__(
        self,
        model_path: str,
        dtype: str = "float32",
        tokenizer_path: str | None = None,
        trust_remote_code: bool = False,
        **engine_kwargs,
    ):
        self.tokenizer = load_tokenizer(tokenizer_path or model_path, trust_remote_code)
        self.device = actor_device()
        self.model = load_model(model_path, dtype, trust_remote_code).to(self.device).eval()
        self.generate_kwargs = engine_kwargs  # passed to model.generate untouched
        self._version = 0

    @classmethod
    def sharing(cls, model: torch.nn.Module, tokenizer, **engine_kwargs) -> HFEngine:
        """An engine that generates from `model` itself, the learner's module (resources.colocate):
        no copy of the weights, so a weight sync is only `set_weight_version`. The caller keeps the
        module in eval mode (the learner does: dropout off) and the RNG out of its way."""
        engine = cls.__new__(cls)
        engine.tokenizer, engine.model, engine.generate_kwargs, engine._version = tokenizer, model, engine_kwargs, 0
        engine.device = next(model.parameters()).device
        return engine

    def set_weight_version(self, version: int) -> None:
        """A shared module (`sharing`) holds the trained weights already: a sync only tags them."""
        self._version = version

    @property
    def weight_version(self) -> int:
        return self._version

    @torch.no_grad()
    def generate(self, prompt_token_ids: list[list[int]], sampling: SamplingParams) -> list[list[Completion]]:
        if sampling.seed is not None:  # on CPU only the CPU generator: torch.manual_seed seeds every backend too (ms)
            (torch.random.default_generator if self.device.type == "cpu" else torch).manual_seed(sampling.seed)
        flat = [ids for ids in prompt_token_ids for _ in range(sampling.n)]
        out: list[Completion] = []
        for start in range(0, len(flat), GENERATE_CHUNK):
            out += self._generate_chunk(flat[start : start + GENERATE_CHUNK], sampling)
        return [out[i * sampling.n : (i + 1) * sampling.n] for i in range(len(prompt_token_ids))]

    def _generate_chunk(self, prompts: list[list[int]], sampling: SamplingParams) -> list[Completion]:
        pad = self.tokenizer.pad_token_id
        width = max(map(len, prompts))
        input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=self.device)
        attention_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=self.device)
        stop_ids = {self.tokenizer.eos_token_id, *sampling.stop_token_ids}
        greedy = sampling.temperature == 0
        kwargs = dict(
            max_new_tokens=sampling.max_tokens,
            do_sample=not greedy,
            eos_token_id=sorted(stop_ids),
            pad_token_id=pad,
            output_logits=True,
            return_dict_in_generate=True,
        )
        if not greedy:
            kwargs.update(
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                top_k=sampling.top_k if sampling.top_k > 0 else None,
            )
        if sampling.stop:
            kwargs.update(stop_strings=list(sampling.stop), tokenizer=self.tokenizer)
        result = self.model.generate(
            input_ids=input_ids, attention_mask=attention_mask, **kwargs, **self.generate_kwargs
        )
        new_tokens = result.sequences[:, width:]  # [N, T]
        logits = torch.stack(result.logits, dim=1).float()  # [N, T, V] raw, before processors
        logprobs = torch.log_softmax(logits / (sampling.temperature if not greedy else 1.0), dim=-1)
        token_logprobs = logprobs.gather(-1, new_tokens.unsqueeze(-1)).squeeze(-1)
        return [
            self._cut(new_tokens[i].tolist(), token_logprobs[i].tolist(), stop_ids, sampling)
            for i in range(len(prompts))
        ]

    def _cut(
        self, tokens: list[int], logprobs: list[float], stop_ids: set[int], sampling: SamplingParams
    ) -> Completion:
        """Trim the padding generate adds after a finished row; keep the stop token itself."""
        for t, tok in enumerate(tokens):
            if tok in stop_ids:
                return Completion(tokens[: t + 1], logprobs[: t + 1], "stop")
            if sampling.stop:
                text = self.tokenizer.decode(tokens[: t + 1])
                if any(text.endswith(s) for s in sampling.stop):
                    return Completion(tokens[: t + 1], logprobs[: t + 1], "stop")
        return Completion(tokens, logprobs, "length")

    def update_weights(self, weights: Weights, version: int) -> None:
        load_named_tensors(self.model, weights)
        self._version = version

    def sleep(self) -> None:  # the HF engine keeps no KV cache between calls
        pass

    def wake(self) -> None:
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
