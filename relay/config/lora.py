"""model.lora.*: LoRA adapters on the policy through peft (relay/models/lora.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from relay.config.engine_registry import capabilities


@dataclass(frozen=True)
class LoraConfig:
    """LoRA adapters on the policy through peft (relay/models/lora.py): only the adapters train and hold
    optimizer state; the reference policy is the base with the adapters switched off."""

    rank: int = 0  # 0: off (full fine-tuning); else the adapters' rank r
    alpha: float = 16.0  # the adapter output is scaled by alpha / rank
    dropout: float = 0.0  # on the adapters' input, in the learner's update passes only
    # Module names (or suffixes) to adapt, or ("all-linear",); default: Qwen2/Llama attention and MLP.
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    # What a weight sync sends: "merged" (base + adapters; every engine), "adapter" (the adapters alone,
    # a few MB, where the engine serves LoRA: vLLM), "auto" (adapter where it can, merged elsewhere).
    sync: Literal["auto", "adapter", "merged"] = "auto"

    def sends_adapters(self, engine: str) -> bool:
        """Whether weight syncs carry the adapters alone (else merged weights)."""
        auto = self.sync == "auto" and self.rank > 0 and capabilities(engine).max_lora_adapter_rank > 0
        return self.rank > 0 and (self.sync == "adapter" or auto)
