"""The Engine protocol: token ids in, token ids and logprobs out; weights updated in place."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

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


class Engine(Protocol):
    """Every rollout engine (hf, vllm, sglang) implements this."""

    def generate(self, prompt_token_ids: list[list[int]], sampling: SamplingParams) -> list[list[Completion]]:
        """One list of `sampling.n` completions per prompt, in prompt order."""
        ...

    def update_weights(self, weights: Weights, version: int) -> None:
        """Load new policy weights in place (HF parameter names -> tensors or numpy arrays)."""
        ...

    @property
    def weight_version(self) -> int: ...

    def sleep(self) -> None:
        """Free what can be freed (KV cache) while the learner trains; no-op where unsupported."""
        ...

    def wake(self) -> None: ...
