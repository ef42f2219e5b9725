"""model.*: which model the learner, reference and rollout engines load, and how."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from relay.config.lora import LoraConfig


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
    # The attention kernel of the learner, reference and HF engine; null: the library's choice (sdpa).
    # eager halves a CPU decode step of SmolLM2-135M at batch 64 (benchmarks/attention_kernels.py).
    attn_implementation: Literal["eager", "sdpa", "flash_attention_2"] | None = None
    lora: LoraConfig = LoraConfig()
