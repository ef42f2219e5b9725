"""`model.attn_implementation: eager_grouped`: transformers' eager attention without copying the
keys and values once per query head.

A model with grouped-query attention (SmolLM2-135M: 9 query heads over 3 key/value heads) runs
eager attention by repeating each key/value head for every query head that reads it, a copy of
the whole KV cache at every decode step and layer. Here the query heads that share a key/value
head are stacked into one matrix instead, so each key/value head is multiplied once, by all of
its queries together, and nothing is copied. The arithmetic is eager's: scaled scores plus the
additive mask, a float32 softmax cast back, then the values.
"""

from __future__ import annotations

import torch

from relay.config.model import EAGER_GROUPED


def eager_grouped_attention(
    module: torch.nn.Module,
    query: torch.Tensor,  # [batch, heads, q, dim]
    key: torch.Tensor,  # [batch, kv_heads, k, dim]
    value: torch.Tensor,  # [batch, kv_heads, k, dim]
    attention_mask: torch.Tensor | None,  # additive, [batch, 1, q, k]
    scaling: float,
    dropout: float = 0.0,
    softcap: float | None = None,
    s_aux: torch.Tensor | None = None,
    **_,
) -> tuple[torch.Tensor, torch.Tensor]:
    if softcap is not None or s_aux is not None:  # Gemma's score capping, gpt-oss's attention sinks
        raise ValueError(
            f"{EAGER_GROUPED} has no score softcapping or attention sinks; set model.attn_implementation=eager"
        )
    batch, heads, q_len, dim = query.shape
    kv_heads, k_len = key.shape[1], key.shape[2]
    group = heads // kv_heads
    # Query head h reads key/value head h // group, so a group's heads are adjacent.
    stacked = query.reshape(batch, kv_heads, group * q_len, dim)
    scores = torch.matmul(stacked, key.transpose(2, 3)).view(batch, heads, q_len, k_len) * scaling
    if attention_mask is not None:
        scores = scores + attention_mask
    weights = torch.nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = torch.nn.functional.dropout(weights, p=dropout, training=module.training)
    out = torch.matmul(weights.view(batch, kv_heads, group * q_len, k_len), value)
    return out.view(batch, heads, q_len, dim).transpose(1, 2).contiguous(), weights


def register_eager_grouped() -> None:
    """Make `eager_grouped` a name transformers' models accept, with eager's additive mask."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask

    AttentionInterface.register(EAGER_GROUPED, eager_grouped_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(EAGER_GROUPED, eager_mask)
