"""Rollout engines behind one protocol (relay.engines.base.Engine)."""

from __future__ import annotations


def make_engine(cfg, model_path: str):
    """The engine named by cfg.rollout.engine; native options pass through untouched."""
    from relay.models.resolve import model_folder

    m, r = cfg.model, cfg.rollout
    # a GGUF tokenizer_path: its converted folder, which vLLM and SGLang can read too
    tokenizer_path = model_folder(m.tokenizer_path, "model.tokenizer_path") if m.tokenizer_path else None
    if r.engine == "hf":
        from relay.engines.hf import HFEngine

        return HFEngine(model_path, m.dtype, tokenizer_path, m.trust_remote_code, **r.engine_kwargs)
    if r.engine == "vllm":
        from relay.engines.vllm import VLLMEngine

        lora = m.lora if m.lora.sends_adapters("vllm") else None
        return VLLMEngine(model_path, m.dtype, tokenizer_path, m.trust_remote_code, lora=lora, **r.engine_kwargs)
    if r.engine == "sglang":
        from relay.engines.sglang import SGLangEngine

        return SGLangEngine(model_path, m.dtype, tokenizer_path, m.trust_remote_code, **r.engine_kwargs)
    raise ValueError(f"rollout.engine: {r.engine!r} is not available in this build")
