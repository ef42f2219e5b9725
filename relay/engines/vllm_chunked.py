"""rollout.partial on vLLM: a call generated `chunk` new tokens at a time, so weights can change
between two chunks (VLLMEngine.generate(chunk=, between=); docs/pipeline.md "Partial rollouts").

Each chunk is a fresh request per unfinished row: prompt = the row's prompt plus its tokens so far,
max_tokens = chunk. vLLM's prefix cache serves the re-read prefix from the KV blocks of the previous
chunk (update_weights resets that cache: those blocks came from the old weights), so a chunk costs
about one prefill of its new tokens rather than of the whole prefix.

Rows end exactly where one unchunked request would end them:
- stop tokens (EOS included), `max_tokens` and a full context (`max_model_len`, vLLM's "length"):
  vLLM stops the chunk at the stop token; the two lengths are counted over all chunks (a chunk whose
  prompt fills the context would be refused by vLLM);
- stop strings: vLLM matches them on each chunk's own text only, so one that spans a chunk boundary
  is found here, on the decoded text of all the row's tokens, with vLLM's own rule (the first token
  after which the text contains the string; skip_special_tokens as vLLM's detokenizer).
Seeds: vLLM seeds a request's sampler once, so a resubmitted chunk with the request's seed would
replay the first chunk's random numbers. Chunk c of flat row r (prompt i, sample k: r = i*n + k)
gets `seed + r + c * CHUNK_SEED_STRIDE`: chunk 0 is the unchunked request's own seed, every other
chunk a distinct, reproducible stream. Sampled tokens therefore differ from an unchunked call's
after the first chunk (same distribution); greedy tokens are the same.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from relay.engines.base import Completion, SamplingParams

CHUNK_SEED_STRIDE = 0x9E3779B97F4A7C15 % 2**63  # odd, far from any row index: no two (row, chunk) share a seed


@dataclass
class _Row:
    prompt: list[int]
    seed: int | None  # the unchunked request's seed for this sample
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top: list = field(default_factory=list)  # sampling.top_logprobs > 0: each token's alternatives
    versions: list[int] = field(default_factory=list)
    finish: str | None = None


def generate_chunked(
    engine, prompt_token_ids: list[list[int]], sampling: SamplingParams, chunk: int, between: Callable[[], None] | None
) -> list[list[Completion]]:
    """VLLMEngine.generate with chunk > 0: one list of `sampling.n` completions per prompt."""
    n = sampling.n
    rows = [
        _Row(list(ids), None if sampling.seed is None else sampling.seed + i * n + k)
        for i, ids in enumerate(prompt_token_ids)
        for k in range(n)
    ]
    context = engine.llm.llm_engine.model_config.max_model_len  # a full context ends a row ("length")
    index = 0
    while True:
        live = [r for r in rows if r.finish is None]
        steps = [min(chunk, sampling.max_tokens - len(r.tokens)) for r in live]
        version = engine.weight_version
        params = [
            engine._params(replace(sampling, n=1, max_tokens=m, seed=chunk_seed(r.seed, index)), 0)
            for r, m in zip(live, steps)
        ]
        outputs = engine._requests([r.prompt + r.tokens for r in live], params)
        for r, m, (c,) in zip(live, steps, outputs):
            start = len(r.tokens)
            r.tokens += c.token_ids
            r.logprobs += c.logprobs
            r.top += c.top_logprobs or []
            end = stop_string_end(engine.tokenizer, r.tokens, start, sampling.stop) if sampling.stop else None
            if end is not None:  # a stop string completed by this chunk, maybe across the boundary
                del r.tokens[end:], r.logprobs[end:], r.top[end:]
                r.finish = "stop"
            elif c.finish_reason == "stop":  # stop token or a stop string inside the chunk
                r.finish = "stop"
            elif len(r.tokens) >= sampling.max_tokens or len(r.prompt) + len(r.tokens) >= context:
                r.finish = "length"  # the call's max_tokens, or the model's context is full
            elif len(c.token_ids) < m:
                raise RuntimeError(f"vllm ended a chunk after {len(c.token_ids)} of {m} tokens with 'length'")
            r.versions += [version] * (len(r.tokens) - start)
        index += 1
        if all(r.finish is not None for r in rows):
            break
        if between is not None:
            between()
    top = lambda r: r.top if sampling.top_logprobs else None  # noqa: E731
    flat = [Completion(r.tokens, r.logprobs, r.finish, versions=r.versions, top_logprobs=top(r)) for r in rows]
    return [flat[i * n : (i + 1) * n] for i in range(len(prompt_token_ids))]


def chunk_seed(seed: int | None, index: int) -> int | None:
    return None if seed is None else (seed + index * CHUNK_SEED_STRIDE) % 2**63


def stop_string_end(tokenizer, tokens: list[int], start: int, stop: tuple[str, ...]) -> int | None:
    """The length of `tokens` up to the first token at or after `start` whose text so far contains
    a stop string (vLLM's rule: the matched text is kept), or None. Tokens before `start` are known
    not to complete one. One decode when nothing matches; per token only to find where one does."""

    def text(upto: int) -> str:
        return tokenizer.decode(tokens[:upto], skip_special_tokens=True)

    if not any(s in text(len(tokens)) for s in stop):
        return None
    for t in range(start + 1, len(tokens) + 1):
        if any(s in text(t) for s in stop):
            return t
    return None
