"""The HF engine's shared prefill (relay/engines/hf_prefill.py): rows with the same prompt prefill
it once, and every token id and logprob is bit-identical to prefilling each row. Tiny model, about
ten seconds."""

from __future__ import annotations

import copy

import pytest
import torch

from relay.config.lora import LoraConfig
from relay.engines.base import SamplingParams
from relay.engines.hf import HFEngine, generation_config
from relay.engines.hf_prefill import (
    MIN_SHARED_PREFIX,
    can_share,
    generation_module,
    rows_by_prompt,
    shared_prefix_length,
)
from relay.envs.arithmetic import make_rows
from relay.models.loading import load_model
from relay.models.lora import attach_adapters
from relay.models.tiny import encode_chat

N = 4  # samples per prompt


@pytest.fixture(autouse=True)
def one_thread():
    """Bit-identical holds on one thread; torch's thread count is process-wide and other tests'
    engine threads set it too, so each test sets it again."""
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def engines(tiny_model_path):
    """(sharing, not sharing) around one module."""
    torch.set_num_threads(1)
    shared = HFEngine(tiny_model_path, "float32")
    return shared, HFEngine.sharing(shared.model, shared.tokenizer, share_prefill=False)


@pytest.fixture(scope="module")
def prompts(engines):
    """Prompts of different lengths (left padding), and one that starts another's text so only
    identical token lists may share."""
    tokenizer = engines[0].tokenizer
    rows = [encode_chat(tokenizer, row["prompt"]) for row in make_rows(5, seed=7, digits=2)]
    return rows + [rows[0] + tokenizer("12", add_special_tokens=False).input_ids]


def as_rows(prompts: list[list[int]]) -> list[list[int]]:
    """Each prompt N times, one entry per row: what the agent loop hands the engine (n=1)."""
    return [p for p in prompts for _ in range(N)]


def generate_counting(engine: HFEngine, prompts, sampling, **kwargs):
    """(engine.generate's groups, how many rows its first forward ran over)."""
    seen: list[int] = []
    hook = generation_module(engine.model).register_forward_pre_hook(
        lambda module, args, inputs: seen.append(inputs["input_ids"].shape[0]), with_kwargs=True
    )
    try:
        return engine.generate(prompts, sampling, **kwargs), seen[0]
    finally:
        hook.remove()


def assert_identical(a, b) -> None:
    """Same groups, token ids, finish reasons and versions, and logprobs to 1e-5: alone in a
    process they are bit-identical, but after other tests have run the CPU kernels torch picks
    can round the last bits differently for the two batch shapes."""
    assert [len(g) for g in a] == [len(g) for g in b]
    for x, y in zip((c for g in a for c in g), (c for g in b for c in g)):
        assert x.token_ids == y.token_ids
        assert x.logprobs == pytest.approx(y.logprobs, abs=1e-5, rel=0)
        assert (x.finish_reason, x.versions) == (y.finish_reason, y.versions)


SETTINGS = {
    "sampling": SamplingParams(temperature=1.0, max_tokens=8, seed=3),
    "greedy": SamplingParams(temperature=0.0, max_tokens=8),
    "top_k_top_p": SamplingParams(temperature=0.7, top_p=0.9, top_k=5, max_tokens=8, seed=1),
    "hot": SamplingParams(temperature=1.5, max_tokens=12, seed=11),
    "stop_token": SamplingParams(temperature=1.0, max_tokens=8, seed=5, stop_token_ids=(30,)),
    "no_seed": SamplingParams(temperature=1.0, max_tokens=8),
}


@pytest.mark.parametrize("name", list(SETTINGS))
def test_rows_share_and_match_unshared(engines, prompts, name):
    shared, unshared = engines
    sampling = SETTINGS[name]
    if sampling.seed is None:  # the global generator as a run leaves it, the same for both
        torch.manual_seed(0)
    out, rows = generate_counting(shared, as_rows(prompts), sampling)
    if sampling.seed is None:
        torch.manual_seed(0)
    assert rows == len(prompts)
    assert_identical(out, unshared.generate(as_rows(prompts), sampling))
    tokens = {tuple(c.token_ids) for g in out for c in g}
    assert len(tokens) > len(prompts) or sampling.temperature == 0  # rows of one prompt did differ


def test_n_per_prompt_and_stop_strings(engines, prompts):
    """sampling.n > 1 (the engine's own repeats) and stop strings (generate's tokenizer criterion)."""
    shared, unshared = engines
    greedy = shared.generate(prompts, SamplingParams(temperature=0.0, max_tokens=8))
    stop = shared.tokenizer.decode(greedy[0][0].token_ids[1:2])
    sampling = SamplingParams(n=N, temperature=1.0, max_tokens=8, seed=2, stop=(stop,))
    out, rows = generate_counting(shared, prompts, sampling)
    assert rows == len(prompts)
    assert_identical(out, unshared.generate(prompts, sampling))
    assert any(c.finish_reason == "stop" and stop in shared.tokenizer.decode(c.token_ids) for g in out for c in g)


def test_chunked_generation_matches(engines, prompts):
    """generate(chunk=..., between=...): the first chunk shares; later chunks share where rows still
    agree; `between` may change the weight version and every token records its own."""
    shared, unshared = engines
    sampling = SamplingParams(temperature=1.0, max_tokens=9, seed=4)
    out = {}
    for name, engine in (("shared", shared), ("unshared", unshared)):
        engine.set_weight_version(0)
        calls = []

        def between(engine=engine, calls=calls):
            calls.append(1)
            engine.set_weight_version(len(calls))

        out[name] = engine.generate(as_rows(prompts), sampling, chunk=3, between=between)
    assert_identical(out["shared"], out["unshared"])
    assert {v for g in out["shared"] for c in g for v in c.versions} >= {0, 1}
    shared.set_weight_version(0), unshared.set_weight_version(0)


def test_continuation_prompts_share_only_identical_rows(engines, prompts):
    """Multi-turn rows: each row's prompt plus its own response so far; only equal lists share."""
    shared, unshared = engines
    first = shared.generate(as_rows(prompts), SamplingParams(temperature=1.0, max_tokens=3, seed=9))
    turn2 = [p + g[0].token_ids for p, g in zip(as_rows(prompts), first)]
    expected = len(rows_by_prompt(turn2)[0])
    assert len(prompts) < expected < len(turn2)  # some rows agree, some do not
    sampling = SamplingParams(temperature=1.0, max_tokens=6, seed=10)
    out, rows = generate_counting(shared, turn2, sampling)
    assert rows == expected
    assert_identical(out, unshared.generate(turn2, sampling))


def test_engine_kwargs_settings_still_apply(tiny_model_path, prompts):
    """generate's own settings from rollout.engine_kwargs (min_new_tokens: no EOS before 5 tokens)."""
    shared = HFEngine(tiny_model_path, "float32", min_new_tokens=5)
    unshared = HFEngine.sharing(shared.model, shared.tokenizer, share_prefill=False, min_new_tokens=5)
    sampling = SamplingParams(temperature=1.0, max_tokens=8, seed=3)
    out = shared.generate(as_rows(prompts), sampling)
    assert all(len(c.token_ids) >= 5 for g in out for c in g)
    assert_identical(out, unshared.generate(as_rows(prompts), sampling))


def test_lora_model_shares_and_matches(tiny_model_path, engines, prompts):
    """A peft-wrapped module (LoRA, the colocated learner's): the adapters act in the shared prefill."""
    tokenizer = engines[0].tokenizer
    model = attach_adapters(load_model(tiny_model_path, "float32"), LoraConfig(rank=4)).eval()
    with torch.no_grad():  # lora_B starts at zero: make the adapters change the output
        generator = torch.Generator().manual_seed(0)
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.5)
    shared = HFEngine.sharing(model, tokenizer)
    unshared = HFEngine.sharing(model, tokenizer, share_prefill=False)
    sampling = SamplingParams(temperature=0.0, max_tokens=8)
    out, rows = generate_counting(shared, as_rows(prompts), sampling)
    assert rows == len(prompts)
    assert_identical(out, unshared.generate(as_rows(prompts), sampling))
    base = engines[1].generate(as_rows(prompts), sampling)
    assert [c.token_ids for g in out for c in g] != [c.token_ids for g in base for c in g]


def test_rows_by_prompt_and_when_generate_would_not_prefill_plainly(engines):
    assert rows_by_prompt([[1, 2], [1, 2], [1], [1, 2, 3], [1]]) == ([0, 2, 3], [0, 0, 1, 2, 1])
    model = generation_module(engines[0].model)
    config = generation_config(8, (2,), 0, ())
    assert can_share(model, config, {})
    assert not can_share(model, config, {"logits_processor": []})  # native arguments: generate as it is
    for setting in ({"num_beams": 2}, {"use_cache": False}, {"cache_implementation": "static"}):
        changed = copy.deepcopy(config)
        changed.update(**setting)
        assert not can_share(model, changed, {}), setting


def test_a_long_shared_prefix_is_prefilled_once_and_rows_match_unshared(engines):
    """Multi-turn rows of one task: the same system prompt, then each row's own question and turns.
    The prefix is prefilled in one row and its cache repeated; token ids match unshared generation
    and logprobs agree to float noise (the prefix and the rest are two matrix shapes, not one)."""
    shared, unshared = engines
    tokenizer = shared.tokenizer
    system = tokenizer("You can call tools. " * 12, add_special_tokens=False).input_ids
    rows = [system + encode_chat(tokenizer, row["prompt"]) for row in make_rows(6, seed=3, digits=2)]
    rows[1] += tokenizer(" and more text", add_special_tokens=False).input_ids  # rows of different lengths
    assert shared_prefix_length(rows) >= MIN_SHARED_PREFIX
    for sampling in (
        SamplingParams(temperature=0.0, max_tokens=8),
        SamplingParams(temperature=1.0, max_tokens=8, seed=3),
    ):
        shapes: list[tuple[int, int]] = []
        hook = generation_module(shared.model).register_forward_pre_hook(
            lambda module, args, inputs, seen=shapes: seen.append(tuple(inputs["input_ids"].shape)), with_kwargs=True
        )
        try:
            out = shared.generate(rows, sampling)
        finally:
            hook.remove()
        assert shapes[0] == (1, shared_prefix_length(rows))  # the first forward: the prefix, one row
        plain = unshared.generate(rows, sampling)
        for x, y in zip((c for g in out for c in g), (c for g in plain for c in g)):
            assert x.token_ids == y.token_ids and x.finish_reason == y.finish_reason
            assert x.logprobs == pytest.approx(y.logprobs, abs=1e-4, rel=0)
