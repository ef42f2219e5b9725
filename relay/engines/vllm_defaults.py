"""What relay passes to vLLM unless the user's rollout.engine_kwargs (or environment) says otherwise."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

EXTENSION = "relay.engines.vllm.RelayWorkerExtension"
# In-process engine core and a 1 GiB KV cache: about 2-3 s to start instead of 18-60 s
# (measured on the tiny model). Set only where the user has not set them.
CPU_ENV_DEFAULTS = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}


def default_llm_kwargs(on_cpu: bool, max_len: int | None = None) -> dict[str, Any]:
    """What relay passes to vllm.LLM unless engine_kwargs says otherwise. `max_len`: the model's
    longest sequence (max_position_embeddings), where known."""
    kwargs: dict[str, Any] = {
        "logprobs_mode": "processed_logprobs",  # see relay/engines/vllm.py's docstring
        "worker_extension_cls": EXTENSION,
    }
    if on_cpu:
        kwargs["enforce_eager"] = True  # torch.compile on CPU: ~60 s per start, not cached
        if max_len:  # relay seeds every request; a seeded prompt split over scheduler steps (chunked
            # prefill) fails on CPU: vLLM rewinds its torch.Generator's offset, which CPU generators
            # lack ("CPU Generator does not use offset"). Whole prompts: a step must hold the longest.
            kwargs.update(enable_chunked_prefill=False, max_num_batched_tokens=max(4096, max_len))
    else:
        kwargs["enable_sleep_mode"] = True  # sleep()/wake() free the GPU while the learner trains
        kwargs["weight_transfer_config"] = {"backend": "ipc"}
    return kwargs


def max_positions(model_path: str) -> int | None:
    """The model folder's config.json max_position_embeddings, if it says."""
    try:
        return int(json.loads((Path(model_path) / "config.json").read_text())["max_position_embeddings"])
    except (OSError, KeyError, TypeError, ValueError):
        return None
