"""vLLM serving the learner's LoRA adapters on its base weights (model.lora.sync: adapter).

A sync then carries the adapters alone (relay.models.lora.adapter_state_dict: a few MB instead of the
whole model). The engine writes them as a peft adapter folder and registers it with vLLM's LoRA
support under a new id; every later generate call names that adapter. vLLM computes
base + scaling * B @ A itself, so its logprobs stay the learner's (the adapted model's).

The folder lives in /dev/shm where there is one (memory, not disk) and is replaced by the next
version's; vLLM reads it once, when the adapter is added. The adapter is added inside the sync,
so a broken one fails there and not in the middle of a rollout.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from relay.config.lora import LoraConfig
from relay.engines.base import Weights, named_items
from relay.weights.transfer import as_tensor

# The values vLLM accepts for max_lora_rank: it sizes the adapter buffers by it.
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def lora_llm_kwargs(lora: LoraConfig) -> dict:
    """What vllm.LLM needs to serve one adapter of this rank."""
    return {"enable_lora": True, "max_lora_rank": min(r for r in VLLM_LORA_RANKS if r >= lora.rank), "max_loras": 1}


class AdapterSlot:
    """The adapter the engine serves now (`request`: None until the first sync, when the model's
    own weights are what the learner's fresh adapters compute: peft starts lora_B at zero)."""

    def __init__(self, llm, lora: LoraConfig):
        self.llm, self.lora = llm, lora
        self.root = Path(tempfile.mkdtemp(prefix="relay-lora-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
        self.request = None
        self.loaded = 0  # adapters registered so far: each gets a fresh id (vLLM caches by id)

    def load(self, weights: Weights, version: int) -> None:
        from safetensors.torch import save_file
        from vllm.lora.request import LoRARequest

        tensors = {name: as_tensor(value).contiguous() for name, value in named_items(weights)}
        if not tensors or not all(".lora_" in name for name in tensors):
            raise ValueError("model.lora.sync=adapter: the learner sent weights that are not LoRA adapters")
        folder = self.root / f"v{version}"
        folder.mkdir(exist_ok=True)
        save_file(tensors, str(folder / "adapter_model.safetensors"), metadata={"format": "pt"})
        adapter_config(self.lora, tensors).save_pretrained(str(folder))
        previous, self.loaded = self.request, self.loaded + 1
        self.request = LoRARequest(f"relay-v{version}", self.loaded, str(folder))
        self.llm.llm_engine.add_lora(self.request)
        if previous is not None:
            self.llm.llm_engine.remove_lora(previous.lora_int_id)
            shutil.rmtree(previous.lora_path, ignore_errors=True)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def adapter_config(lora: LoraConfig, tensors: dict):
    """The peft config of the adapters sent: their rank and alpha, and as target modules the ones
    that have tensors (what "all-linear" or name suffixes resolved to in the learner)."""
    import peft

    targets = sorted({name.split(".lora_")[0].rpartition(".")[2] for name in tensors})
    return peft.LoraConfig(r=lora.rank, lora_alpha=lora.alpha, target_modules=targets, bias="none")
