"""The Engine protocol: token ids in, token ids and logprobs out; weights updated in place.

Every call relay makes on an engine is declared here, so an engine that has these members works
everywhere one is used (the agent loop, the rollout worker, the weight receiver, the judge).
Which engines exist and what each can do beyond the protocol is relay/config/engine_registry.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # for the annotations only: this module stays importable without transformers or torch
    import torch
    from transformers import PreTrainedTokenizerBase

# New weights for Engine.update_weights: HF parameter name -> tensor (or numpy array), either as a
# mapping or as a one-pass stream of (name, tensor) pairs. A stream (the broadcast receiver's,
# relay.weights.transfer.ReceivedWeights) holds one bucket at a time: engines copy each tensor
# before asking for the next, so a worker never needs a second full copy of the model.
Weights = Mapping[str, Any] | Iterable[tuple[str, Any]]


def named_items(weights: Weights) -> Iterator[tuple[str, Any]]:
    return iter(weights.items()) if isinstance(weights, Mapping) else iter(weights)


def max_tensor_bytes(weights: Weights) -> int | None:
    """The largest tensor's size in bytes where it is known without consuming a stream."""
    if isinstance(weights, Mapping):
        return max((v.nbytes for v in weights.values()), default=0)  # numpy arrays and tensors alike
    return getattr(weights, "max_tensor_bytes", None)


@dataclass(frozen=True)
class SamplingParams:
    n: int = 1  # samples per prompt
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1: off
    max_tokens: int = 32
    stop_token_ids: tuple[int, ...] = ()  # generation ends after emitting one of these (EOS included by the engine)
    stop: tuple[str, ...] = ()  # stop strings; the matched text is kept in the output
    seed: int | None = None
    # k > 0: per generated token, the k most likely tokens of the distribution `logprobs` is taken
    # from (Completion.top_logprobs; the endpoint's top_logprobs). Engines that can have a class
    # attribute `max_top_logprobs` (the largest k); 0 computes nothing and samples the same tokens.
    top_logprobs: int = 0


@dataclass
class Completion:
    token_ids: list[int]
    # log p(token) under softmax(logits / temperature) of the *unprocessed* distribution
    # (before top-p/top-k truncation): the same quantity the learner recomputes.
    logprobs: list[float]
    finish_reason: str  # "stop" (EOS, stop token or stop string) | "length"
    # Per token, the weight version that sampled it, where weights may change within one generate
    # (HF or vLLM engine with chunk > 0, rollout.partial); None: every token on the engine's weight_version.
    versions: list[int] | None = None
    # sampling.top_logprobs = k > 0: per token, the k most likely (token id, logprob), most likely
    # first, from the same distribution as `logprobs` (the sampled token's own is among them when
    # it ranks in the top k); None when k = 0.
    top_logprobs: list[list[tuple[int, float]]] | None = None


class Engine(Protocol):
    """Every rollout engine implements this. relay.engines.make_engine builds one as
    `Class(model_path, dtype, tokenizer_path, trust_remote_code, **rollout.engine_kwargs)`, plus
    `lora=` where its capability record serves LoRA adapters."""

    # The model's tokenizer: the agent loop renders prompts and decodes turns with it, so its ids
    # are the ones the engine reads and writes.
    tokenizer: PreTrainedTokenizerBase

    def generate(
        self,
        prompt_token_ids: list[list[int]],
        sampling: SamplingParams,
        *,
        chunk: int = 0,
        between: Callable[[], None] | None = None,
    ) -> list[list[Completion]]:
        """One list of `sampling.n` completions per prompt, in prompt order. chunk > 0 (rollout.partial,
        engines whose record has partial_rollouts; others raise): `chunk` new tokens at a time,
        `between()` run between two chunks (it may load new weights; Completion.versions says which
        version sampled each token)."""
        ...

    def update_weights(self, weights: Weights, version: int) -> None:
        """Load new policy weights in place (HF parameter names -> tensors or numpy arrays)."""
        ...

    @property
    def weight_version(self) -> int:
        """The version of the weights generating now (0: the weights it started with)."""
        ...

    def sleep(self) -> None:
        """Free what can be freed (KV cache) while the learner trains; no-op where unsupported."""
        ...

    def wake(self) -> None: ...

    def shutdown(self) -> None:
        """Stop what the engine started (child processes, GPU memory) now rather than at exit."""
        ...


class SharingEngine(Engine, Protocol):
    """An engine whose record has colocate (resources.colocate, actors/colocated.py): built on the
    learner's own module instead of a copy, so a weight sync loads nothing and only tags the version."""

    @classmethod
    def sharing(cls, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, **engine_kwargs) -> SharingEngine:
        """An engine that generates from `model` itself."""
        ...

    def set_weight_version(self, version: int) -> None:
        """The shared module holds the trained weights already: name their version."""
        ...
