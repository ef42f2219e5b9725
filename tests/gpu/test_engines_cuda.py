"""vLLM and SGLang on CUDA, one contract: generation, seeds, logprobs against the learner's, live
weight updates, sleep/wake, on a 0.5B-shaped random model in bf16 (tests/gpu/conftest.py)."""

from __future__ import annotations

import pytest
import torch

from relay.engines.base import SamplingParams

pytestmark = pytest.mark.gpu
# bf16 engine vs bf16 learner (different kernels): mean |diff| stays around 1e-3..1e-2.
MEAN_TOL, MAX_TOL = 0.02, 0.3


@pytest.fixture(scope="module", params=["vllm", "sglang"])
def engine(request, qwen05b_path):
    if request.param == "vllm":
        pytest.importorskip("vllm", reason="vllm not installed: pip install 'relay[vllm]'")
        from relay.engines.vllm import VLLMEngine

        e = VLLMEngine(qwen05b_path, "bfloat16", gpu_memory_utilization=0.35, max_model_len=1024)
    else:
        pytest.importorskip("sglang", reason="sglang not installed: pip install 'relay[sglang]'")
        from relay.engines.sglang import SGLangEngine

        # Deterministic inference makes the per-request sampling_seed reproducible.
        e = SGLangEngine(
            qwen05b_path, "bfloat16", mem_fraction_static=0.35, context_length=1024, enable_deterministic_inference=True
        )
    e.name = request.param
    yield e
    e.shutdown()


def test_vllm_uses_the_native_paths(engine):
    if engine.name != "vllm":
        pytest.skip("vLLM only")
    assert engine.weight_sync == "ipc"  # engine core out of process: CUDA IPC weight transfer
    assert engine.exact_truncated_logprobs  # the sampler hook is in place


def test_generation_contract(engine, gpu_prompts, contract):
    contract.check_generation(engine, gpu_prompts)


def test_seeds_reproduce(engine, gpu_prompts, contract):
    contract.check_seeds(engine, gpu_prompts)


@pytest.mark.parametrize("temperature,top_p,top_k", [(1.0, 1.0, -1), (0.7, 0.9, 20), (0.0, 1.0, -1)])
def test_logprobs_match_learner(engine, gpu_prompts, gpu_learner, contract, temperature, top_p, top_k):
    groups = engine.generate(
        gpu_prompts,
        SamplingParams(
            n=1 if temperature == 0 else 4, temperature=temperature, top_p=top_p, top_k=top_k, max_tokens=32, seed=1
        ),
    )
    worst, mean = contract.logprob_diff(
        gpu_learner, gpu_prompts, groups, temperature or 1.0, engine.tokenizer.pad_token_id
    )
    print(
        f"\n{engine.name} bf16 logprob |diff| vs learner (T={temperature}, top_p={top_p}, top_k={top_k}): max {worst:.3e} mean {mean:.3e}"
    )
    assert mean < MEAN_TOL and worst < MAX_TOL


def test_weight_update_serves_new_weights(engine, gpu_prompts, gpu_learner, contract):
    pad = engine.tokenizer.pad_token_id
    new_model, state = contract.perturbed(gpu_learner, seed=0)
    engine.update_weights(state, version=1)
    assert engine.weight_version == 1
    groups = engine.generate(gpu_prompts, SamplingParams(n=2, temperature=1.0, max_tokens=32, seed=2))
    new = contract.logprob_diff(new_model, gpu_prompts, groups, 1.0, pad)
    old = contract.logprob_diff(gpu_learner, gpu_prompts, groups, 1.0, pad)
    print(f"\n{engine.name} after update: mean |diff| vs NEW {new[1]:.3e} (max {new[0]:.3e}), vs OLD {old[1]:.3e}")
    assert new[1] < MEAN_TOL and new[0] < MAX_TOL
    assert old[1] > 5 * new[1]

    original = {k: v.float().cpu().numpy() for k, v in gpu_learner.state_dict().items()}
    engine.update_weights(original, version=2)
    groups = engine.generate(gpu_prompts, SamplingParams(n=1, temperature=0.0, max_tokens=16))
    worst, mean = contract.logprob_diff(gpu_learner, gpu_prompts, groups, 1.0, pad)
    assert mean < MEAN_TOL and worst < MAX_TOL


def test_sleep_frees_memory_and_wake_restores(engine, gpu_prompts, gpu_learner, contract):
    if engine.name == "sglang" and not engine.memory_saver:
        pytest.skip("torch_memory_saver not installed: sglang sleep/wake are no-ops")
    greedy = SamplingParams(n=1, temperature=0.0, max_tokens=8)
    before = engine.generate(gpu_prompts, greedy)
    free_awake = torch.cuda.mem_get_info()[0]
    engine.sleep()
    free_asleep = torch.cuda.mem_get_info()[0]
    print(f"\n{engine.name} sleep freed {(free_asleep - free_awake) / 2**30:.2f} GiB")
    assert free_asleep > free_awake + (1 << 30)
    engine.wake()
    after = engine.generate(gpu_prompts, greedy)
    assert [g[0].token_ids for g in after] == [g[0].token_ids for g in before]

    # A weight update while asleep lands in live memory and is served after waking.
    new_model, state = contract.perturbed(gpu_learner, seed=1)
    engine.sleep()
    engine.update_weights(state, version=3)
    engine.wake()
    groups = engine.generate(gpu_prompts, SamplingParams(n=1, temperature=1.0, max_tokens=16, seed=4))
    assert contract.logprob_diff(new_model, gpu_prompts, groups, 1.0, engine.tokenizer.pad_token_id)[1] < MEAN_TOL
