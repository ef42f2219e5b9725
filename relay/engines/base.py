"""The Engine protocol: token ids in, token ids and logprobs out; weights updated in place."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


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


class Engine(Protocol):
    """Every rollout engine (hf, vllm, sglang) implements this."""

    def generate(self, prompt_token_ids: list[list[int]], sampling: SamplingParams) -> list[list[Completion]]:
        """One list of `sampling.n` completions per prompt, in prompt order."""
        ...

    def update_weights(self, named_tensors: dict[str, Any], version: int) -> None:
        """Load new policy weights (HF parameter names -> tensors or numpy arrays)."""
        ...

    @property
    def weight_version(self) -> int: ...

    def sleep(self) -> None:
        """Free what can be freed (KV cache) while the learner trains; no-op where unsupported."""
        ...

    def wake(self) -> None: ...
