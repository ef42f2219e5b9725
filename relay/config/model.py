"""model.*: which model the learner, reference and rollout engines load, and how."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from relay.config.lora import LoraConfig

# transformers' eager attention with grouped-query heads multiplied without copies (relay/models/attention.py)
EAGER_GROUPED = "eager_grouped"


@dataclass(frozen=True)
class ModelConfig:
    # "tiny" = the model shipped in relay/models/shipped/ (the built-in agent tasks' own warm start);
    # "smollm2-135m" or a .gguf file (converted once to a cached HF folder); else a local HF folder or hub name.
    path: str = "tiny"
    # Multi-turn runs append tokens and never re-render; a template that renders other tokens is refused.
    allow_template_drift: bool = False  # true: train anyway (python -m relay.models.template_check MODEL shows where)
    tokenizer_path: str | None = None  # defaults to `path`
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    trust_remote_code: bool = False
    # The attention kernel of the learner, reference and HF engine; null: the library's choice (sdpa),
    # except eager_grouped where every model role computes in bf16 on a CPU (with_cpu_attention below).
    # eager halves a CPU decode step of SmolLM2-135M at batch 64 (benchmarks/attention_kernels.py).
    attn_implementation: Literal["eager", "eager_grouped", "sdpa", "flash_attention_2"] | None = None
    lora: LoraConfig = LoraConfig()


# The model roles: their resources decide whether the model computes on a CPU.
MODEL_ROLES = ("rollout", "learner", "reference", "critic")


def with_cpu_attention(cfg):
    """`cfg` (a Config) with model.attn_implementation's null decided: eager_grouped where the model
    computes in bf16 (training.mixed_precision=bf16 or model.dtype=bfloat16) and no model role has
    a GPU. torch's CPU sdpa kernel in bf16 took 1.2 ms a call in SmolLM2-135M's decode at 32 rows
    (0.4 ms in float32), 27% of a bf16 generate; eager runs the same attention as bf16 matmuls, and
    eager_grouped (relay/models/attention.py) without copying the key/value heads
    (docs/benchmarks/roofline.md). Elsewhere the library's choice stays."""
    m, res = cfg.model, cfg.resources
    bf16 = cfg.training.mixed_precision == "bf16" or m.dtype == "bfloat16"
    on_cpu = all(getattr(res, role).gpus == 0 for role in MODEL_ROLES)
    if m.attn_implementation is not None or not (bf16 and on_cpu):
        return cfg
    return replace(cfg, model=replace(m, attn_implementation=EAGER_GROUPED))
