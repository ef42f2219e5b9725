"""One prefill per distinct prompt for the HF engine's `generate`.

GRPO samples every prompt `rollout.n` times, and the agent loop hands the engine each row's ids,
so a batch holds each prompt n times and `generate` would prefill every copy. Here the distinct
prompts are prefilled once, as one left-padded batch, and their KV cache and last-position logits
are repeated to the rows that carry them; `generate` then decodes from that cache as it would from
its own prefill.

`generate` runs its prefill in `_prefill` and decodes from what that returns (the first token's
logits and the cache). `answered_prefill` has the model's `_prefill` return the shared result for
one call, so everything after it (logits processors, sampling, stopping criteria, stop strings)
stays the library's own. The shared forward is the one `generate` would run (same padding, same
position ids, same mask rule, logits of the last position only), and on the CPU a row's numbers
do not depend on how many other rows share its batch, so tokens and logprobs are bit-identical to
prefilling every row (tests/unit/test_hf_shared_prefill.py checks it; a GPU library that picks its
matrix kernels by batch size may change the last bits). Prefilling only the prompt minus its
last token and passing that cache to `generate` (the library's documented prefix reuse) needs no
private method, but it runs the last token through a decode step: logits differ by about 2e-6 and
each call makes one more forward over all rows.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
from collections.abc import Iterator

import torch
from transformers import DynamicCache, GenerationConfig
from transformers.generation.utils import GenerationMode
from transformers.utils import ModelOutput


def generation_module(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model whose `generate` runs the loop: a peft model (LoRA) hands `generate`
    on to the model it wraps, whose layers hold the adapters."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def can_share(model: torch.nn.Module, config: GenerationConfig, native_kwargs: dict) -> bool:
    """Whether `generate` would run the one plain prefill that `answered_prefill` stands in for:
    sampling or greedy (beam search and assisted decoding expand or re-run the batch), the default
    dynamic cache, and nothing more asked of the forward. Unset fields take the model's generation
    config, as in `generate` (about 0.3 ms)."""
    if not hasattr(model, "_prefill") or native_kwargs:  # native arguments may reach the forward
        return False
    merged = copy.deepcopy(config)
    merged.update(**model.generation_config.to_dict(), defaults_only=True)
    return (
        merged.get_generation_mode() in (GenerationMode.SAMPLE, GenerationMode.GREEDY_SEARCH)
        and merged.use_cache is not False
        and merged.cache_implementation in (None, "dynamic", "hybrid")  # generate makes "hybrid" dynamic too
        and getattr(merged, "prefill_chunk_size", None) is None
        and not merged.output_attentions
        and not merged.output_hidden_states
    )


def rows_by_prompt(prompts: list[list[int]]) -> tuple[list[int], list[int]]:
    """(the first row of each distinct prompt, each row's distinct prompt): identical token lists
    share; rows that differ anywhere (continuation turns, partial chunks) do not."""
    index: dict[tuple[int, ...], int] = {}
    first_rows: list[int] = []
    prompt_of_row = []
    for row, prompt in enumerate(prompts):
        k = index.setdefault(tuple(prompt), len(index))
        if k == len(first_rows):
            first_rows.append(row)
        prompt_of_row.append(k)
    return first_rows, prompt_of_row


# A prefix every row of a call starts with (a multi-turn task's system prompt and tool schemas) is
# prefilled once, in one row, when it is at least this long: shorter ones do not pay for the second
# forward. Every row keeps at least one token of its own.
MIN_SHARED_PREFIX = 32


def shared_prefix_length(prompts: list[list[int]]) -> int:
    """Tokens every prompt starts with (at most the shortest prompt's length minus one)."""
    first = prompts[0]
    for k in range(min(map(len, prompts)) - 1):
        if any(p[k] != first[k] for p in prompts):
            return k
    return max(min(map(len, prompts)) - 1, 0)


def prefix_layout(prompts: list[list[int]], prefix: int, pad: int) -> tuple[list[list[int]], list[list[int]]]:
    """(ids, mask) of rows laid out as [shared prefix | padding | the row's own tokens]: the prefix
    sits at the same positions in every row, so one row's cache of it serves all of them."""
    width = max(map(len, prompts)) - prefix
    ids = [p[:prefix] + [pad] * (width - len(p) + prefix) + p[prefix:] for p in prompts]
    mask = [[1] * prefix + [0] * (width - len(p) + prefix) + [1] * (len(p) - prefix) for p in prompts]
    return ids, mask


@torch.no_grad()
def shared_prefill(
    model: torch.nn.Module,
    config: GenerationConfig,
    native_kwargs: dict,
    prompts: list[list[int]],
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    prefix: int = 0,
) -> ModelOutput | None:
    """The prefill `generate` would run over every row of `input_ids` (`prompts`, left-padded, or
    in `prefix_layout` when they share `prefix` tokens), run once per distinct prompt and repeated
    to its rows, the shared prefix once in all; None where there is nothing to share or `generate`
    would not run that prefill (`can_share`)."""
    first_rows, prompt_of_row = rows_by_prompt(prompts)
    if (len(first_rows) == len(prompts) and not prefix) or not can_share(model, config, native_kwargs):
        return None
    distinct = torch.tensor(first_rows, device=input_ids.device)
    ids, mask = input_ids[distinct], attention_mask[distinct]
    # generate's own inputs to its prefill: position ids counted from the mask, padding at 0; the mask
    # dropped where there is no padding (the causal-only attention path), logits of the last position
    # only where the model can
    position_ids = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
    last_only = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}
    cache = DynamicCache(config=model.config.get_text_config(decoder=True))
    if prefix:  # the shared prefix in one row, its cache then repeated to every distinct prompt
        model(input_ids=ids[:1, :prefix], position_ids=position_ids[:1, :prefix], past_key_values=cache, use_cache=True, **last_only)
        cache.batch_repeat_interleave(len(first_rows))
    out = model(
        input_ids=ids[:, prefix:],
        attention_mask=None if bool((mask == 1).all()) else mask,
        position_ids=position_ids[:, prefix:],
        past_key_values=cache,
        use_cache=True,
        return_dict=True,
        **last_only,
    )
    rows = torch.tensor(prompt_of_row, device=input_ids.device)
    out.past_key_values.batch_select_indices(rows)  # [B, ...] -> [N, ...]: each row its prompt's copy
    out.logits = out.logits[rows]
    return out


@contextlib.contextmanager
def answered_prefill(model: torch.nn.Module, prefill: ModelOutput | None) -> Iterator[None]:
    """Within the block, the model's next `generate` takes `prefill` as its prefill's result
    instead of running it; nothing changes where `prefill` is None."""
    if prefill is None:
        yield
        return
    model._prefill = lambda *args, **kwargs: prefill  # an instance attribute: this model only
    try:
        yield
    finally:
        del model._prefill
