"""Forward passes shared by the Learner, the Reference and the Critic."""

from __future__ import annotations

import inspect
import sys

import torch

from relay.types import Batch

# The shared-prompt forward (shared_prompt_logits) is two passes instead of one; a pass has a fixed
# cost of its own, so sharing pays only when it skips at least this many prompt tokens. Measured on
# the tiny model (2 CPU cores): 8 prompts x 8 samples of 5-token prompts skip 224 tokens and their
# update took 10-20% longer shared; the default task's 16 x 8 chat prompts skip ~3,200 and took 0.4-0.6x.
SHARED_PROMPT_MIN_SKIPPED_TOKENS = 256


def _response_columns(model, batch: Batch, **kwargs) -> torch.Tensor:
    """The model's outputs at the columns that see everything before each response token:
    [B,R,...]. Column P-1 comes before response token 0 (prompts are left-padded to P)."""
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
        use_cache=False,
        **kwargs,
    )
    P, R = batch.prompt_width, batch.responses.shape[1]
    if "logits_to_keep" in kwargs:  # the last R+1 columns came back: P-1 .. P+R-1
        return out.logits[:, :R]
    return out.logits[:, P - 1 : P - 1 + R]


def response_logits(model, batch: Batch) -> torch.Tensor:
    """Logits predicting each response token: [B,R,V]. Column P-1 predicts response token 0.

    A causal LM that takes `logits_to_keep` (transformers' LMs do) projects only the response
    columns onto the vocabulary: on a chat model the prompt (system prompt, question) is most of
    the sequence, and the vocabulary projection of 49k-token vocabularies is a fifth of the
    forward and backward, and most of their memory, per column. Rows that share their prompt (a
    GRPO group) run it once (shared_prompt_logits) where that skips enough of them."""
    if not keeps_logits(model):
        return _response_columns(model, batch).float()
    if prompt_tokens_skipped(batch) >= SHARED_PROMPT_MIN_SKIPPED_TOKENS:
        shared = shared_prompt_logits(model, batch)
        if shared is not None:
            return shared.float()
    return _response_columns(model, batch, logits_to_keep=batch.responses.shape[1] + 1).float()


def prompt_tokens_skipped(batch: Batch) -> int:
    """The prompt tokens shared_prompt_logits does not run: every repeat of a prompt but its last token."""
    distinct = len(torch.unique(batch.prompts, dim=0))
    return (len(batch.prompts) - distinct) * max(batch.prompt_width - 1, 0)


def shared_prompt_logits(model, batch: Batch) -> torch.Tensor | None:
    """response_logits with each distinct prompt run once: [B,R,V], or None for one-token prompts
    and for models whose backward cannot follow two forwards: one that recomputes activations
    (gradient checkpointing), and an FSDP2 rank's, which frees each layer's gathered weights after
    that layer's first backward.

    The distinct prompts but their last token go through the model as one batch; their key/value
    cache is repeated to the rows that carry them, and each row's last prompt token and its
    response run against it, as the columns that predict the response. Gradients flow back through
    the repeated cache into the one prompt pass, so the loss and every gradient are those of the
    full pass, up to float summation order. A group of n samples costs one prompt and n responses
    instead of n prompts: on a chat model's GRPO batch, where the prompt is most of each row, the
    update's forward and backward shrink by about that share. Every batch takes the two passes,
    whether or not its rows share prompts."""
    P = batch.prompt_width
    if P < 2 or getattr(model, "is_gradient_checkpointing", False) or is_fsdp_module(model):
        return None
    head = P - 1  # prompts are left-padded: column P-1 holds every row's last prompt token
    rows = torch.cat([batch.prompts, batch.attention_mask[:, :P], batch.position_ids[:, :P]], dim=1)
    distinct, prompt_of_row = torch.unique(rows, dim=0, return_inverse=True)
    prefix = model(
        input_ids=distinct[:, :head],
        attention_mask=distinct[:, P : P + head],
        position_ids=distinct[:, 2 * P : 2 * P + head],
        use_cache=True,
        logits_to_keep=1,  # none is read; the cache is what this pass is for
    )
    cache = prefix.past_key_values
    cache.batch_select_indices(prompt_of_row)
    columns = model(
        input_ids=batch.input_ids[:, head:-1],  # the last response token predicts nothing the loss reads
        attention_mask=batch.attention_mask[:, :-1],
        position_ids=batch.position_ids[:, head:-1],
        past_key_values=cache,
        use_cache=True,
    )
    return columns.logits


def is_fsdp_module(model) -> bool:
    """Whether `model` is an FSDP2 module. torch.distributed.fsdp is not imported for the check (it
    pulls in torch.distributed.tensor and sympy: 0.6 s of every actor's start-up); a model that is
    one was made by code that imported it."""
    fsdp = sys.modules.get("torch.distributed.fsdp")
    return fsdp is not None and isinstance(model, fsdp.FSDPModule)


def keeps_logits(model) -> bool:
    """Whether the model's forward takes `logits_to_keep` (a peft wrapper passes it on to its base)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "logits_to_keep" in inspect.signature(base.forward).parameters


def response_values(model, batch: Batch) -> torch.Tensor:
    """V(state before each response token): [B,R], from a value model with one output per token
    (a token-classification head with one label), read at the policy's logit columns."""
    return _response_columns(model, batch)[..., 0].float()


def response_logprobs(model, batch: Batch, temperature: float, with_entropy: bool = False):
    """log p(response token) under softmax(logits / temperature): [B,R]; entropy [B,R] or None."""
    logits = response_logits(model, batch)
    if temperature != 1.0:  # a pass over [B,R,V] and its backward saved at the common temperature
        logits = logits / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    logprobs = logp_all.gather(-1, batch.responses.unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1) if with_entropy else None
    return logprobs, entropy


@torch.no_grad()
def compute_logprobs(model, batch: Batch, temperature: float, device: torch.device | None = None) -> torch.Tensor:
    """response_logprobs without a graph, computed on `device` (default: the model's), returned on
    the CPU (what the Learner's old logprobs and the Reference's logprobs send back): [B,R]."""
    device = device or next(model.parameters()).device
    return response_logprobs(model, batch.to(device), temperature)[0].cpu()
