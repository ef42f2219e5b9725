"""Forward passes shared by the Learner, the Reference and the Critic."""

from __future__ import annotations

import inspect

import torch

from relay.types import Batch


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
    forward and backward, and most of their memory, per column."""
    R = batch.responses.shape[1]
    kwargs = {"logits_to_keep": R + 1} if keeps_logits(model) else {}
    return _response_columns(model, batch, **kwargs).float()


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
    logits = response_logits(model, batch) / temperature
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
