"""HFEngine against the Engine contract (the checks tests/engines runs on vLLM), and make_engine's
branches. Tiny model, a few seconds."""

from __future__ import annotations

import pytest
import torch

from relay.engines import hf
from relay.engines.base import SamplingParams
from relay.engines.hf import HFEngine
from relay.envs.arithmetic import make_rows
from relay.models.loading import load_model
from relay.models.tiny import encode_chat
from tests.engine_checks import check_top_logprobs, max_logprob_diff

TOL = 1e-3


@pytest.fixture(scope="module")
def model_path(tiny_model_path):
    return tiny_model_path


@pytest.fixture(scope="module")
def engine(model_path):
    torch.set_num_threads(1)
    return HFEngine(model_path, "float32")


@pytest.fixture(scope="module")
def learner(model_path):
    return load_model(model_path, "float32").eval()


@pytest.fixture(scope="module")
def prompts(engine):
    return [encode_chat(engine.tokenizer, row["prompt"]) for row in make_rows(6, seed=7, digits=2)]


def test_n_samples_shapes_and_finish_reasons(engine, prompts):
    eos = engine.tokenizer.eos_token_id
    sampling = SamplingParams(n=4, temperature=1.0, max_tokens=6, seed=3)
    groups = engine.generate(prompts, sampling)
    assert len(groups) == len(prompts) and all(len(g) == 4 for g in groups)
    for c in (c for g in groups for c in g):
        assert 1 <= len(c.token_ids) <= 6 and len(c.logprobs) == len(c.token_ids)
        assert c.finish_reason == ("stop" if c.token_ids[-1] == eos else "length")
        assert eos not in c.token_ids[:-1]
        assert c.finish_reason == "stop" or len(c.token_ids) == 6
    assert "stop" in {c.finish_reason for g in groups for c in g}
    short = engine.generate(prompts, SamplingParams(n=2, temperature=1.0, max_tokens=1, seed=3))
    assert all(len(c.token_ids) == 1 for g in short for c in g)


def test_stop_token_ids_and_stop_strings(engine, prompts):
    greedy = SamplingParams(n=1, temperature=0.0, max_tokens=8)
    base = [g[0].token_ids for g in engine.generate(prompts, greedy)]
    i = max(range(len(base)), key=lambda k: len(base[k]))
    stop_id = base[i][1]
    out = engine.generate([prompts[i]], SamplingParams(n=1, temperature=0.0, max_tokens=8, stop_token_ids=(stop_id,)))[
        0
    ][0]
    assert out.token_ids == base[i][: base[i].index(stop_id) + 1] and out.finish_reason == "stop"
    stop_text = engine.tokenizer.decode(base[i][1:2])
    out = engine.generate([prompts[i]], SamplingParams(n=1, temperature=0.0, max_tokens=8, stop=(stop_text,)))[0][0]
    assert out.finish_reason == "stop" and engine.tokenizer.decode(out.token_ids).endswith(stop_text)


def test_seed_reproducible_and_top_k_one_is_greedy(engine, prompts):
    sampling = SamplingParams(n=4, temperature=1.5, max_tokens=6, seed=11)
    a, b = engine.generate(prompts, sampling), engine.generate(prompts, sampling)
    assert [[c.token_ids for c in g] for g in a] == [[c.token_ids for c in g] for g in b]
    assert len({tuple(c.token_ids) for g in a for c in g}) > 1
    greedy = engine.generate(prompts, SamplingParams(n=1, temperature=0.0, max_tokens=6))
    top1 = engine.generate(prompts, SamplingParams(n=1, temperature=1.0, top_k=1, max_tokens=6, seed=5))
    assert [g[0].token_ids for g in top1] == [g[0].token_ids for g in greedy]


@pytest.mark.parametrize("temperature,top_p,top_k", [(1.0, 1.0, -1), (0.7, 0.9, 5), (0.0, 1.0, -1)])
def test_logprobs_match_learner(engine, prompts, learner, temperature, top_p, top_k):
    groups = engine.generate(
        prompts,
        SamplingParams(
            n=1 if temperature == 0 else 3, temperature=temperature, top_p=top_p, top_k=top_k, max_tokens=8, seed=1
        ),
    )
    diff = max_logprob_diff(learner, prompts, groups, temperature or 1.0, engine.tokenizer.pad_token_id)
    print(f"\nhf logprob max |diff| vs learner (T={temperature}, top_p={top_p}, top_k={top_k}): {diff:.2e}")
    assert diff < TOL


def test_top_logprobs_change_nothing_sampled_and_are_the_learners(engine, prompts, learner):
    check_top_logprobs(engine, learner, prompts, k=5)
    check_top_logprobs(engine, learner, prompts[:2], k=20)


def test_weight_update_serves_new_weights(model_path, prompts, learner):
    engine = HFEngine(model_path, "float32")  # its own copy: the module's engine keeps the old weights
    greedy = SamplingParams(n=1, temperature=0.0, max_tokens=8)
    new_model = load_model(model_path, "float32").eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in new_model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.3 * p.std().clamp(min=1e-3))
    state = {k: v.detach().numpy() for k, v in new_model.state_dict().items()}
    for array in state.values():
        array.flags.writeable = False  # as they come from the object store
    engine.update_weights(state, version=3)
    assert engine.weight_version == 3
    after = engine.generate(prompts, greedy)
    pad = engine.tokenizer.pad_token_id
    assert max_logprob_diff(new_model, prompts, after, 1.0, pad) < TOL
    assert max_logprob_diff(learner, prompts, after, 1.0, pad) > 0.05

    # The same weights as a one-pass stream of pairs (what the broadcast receiver hands over).
    engine.update_weights(((k, v.clone()) for k, v in learner.state_dict().items()), version=4)
    assert max_logprob_diff(learner, prompts, engine.generate(prompts, greedy), 1.0, pad) < TOL
    with pytest.raises(KeyError, match="model.no_such.weight"):
        engine.update_weights(iter([("model.no_such.weight", torch.zeros(1))]), version=5)


def test_sleep_wake_are_harmless(engine, prompts):
    greedy = SamplingParams(n=1, temperature=0.0, max_tokens=4)
    before = engine.generate(prompts[:2], greedy)
    engine.sleep()
    engine.wake()
    assert [g[0].token_ids for g in engine.generate(prompts[:2], greedy)] == [g[0].token_ids for g in before]


def test_generate_settings_in_engine_kwargs_reach_generate(model_path, prompts):
    """rollout.engine_kwargs go to generate untouched: its settings through the config relay builds."""
    engine = HFEngine(model_path, "float32", min_new_tokens=5)  # generate's setting: no EOS before 5 tokens
    sampling = SamplingParams(n=2, max_tokens=8, temperature=1.0, seed=3)
    rows = [c for group in engine.generate(prompts, sampling) for c in group]
    assert all(len(c.token_ids) >= 5 for c in rows)
    assert min(len(c.token_ids) for group in HFEngine(model_path).generate(prompts, sampling) for c in group) < 5


@pytest.mark.parametrize(
    "name,module,cls",
    [("vllm", "relay.engines.vllm", "VLLMEngine"), ("sglang", "relay.engines.sglang", "SGLangEngine")],
)
def test_make_engine_branches_pass_options_untouched(monkeypatch, name, module, cls):
    """make_engine hands model path, dtype, tokenizer and engine_kwargs to the named engine."""
    import importlib

    from relay.config import ModelConfig
    from relay.config.role_settings import EngineSettings
    from relay.engines import make_engine

    calls = []
    monkeypatch.setattr(importlib.import_module(module), cls, lambda *a, **kw: calls.append((a, kw)) or "built")
    settings = EngineSettings(
        model=ModelConfig(path="/m", dtype="bfloat16", tokenizer_path="/t"),
        engine=name,
        engine_kwargs={"gpu_memory_utilization": 0.5, "any_native": [1]},
    )
    assert make_engine(settings, "/resolved") == "built"
    want = {"gpu_memory_utilization": 0.5, "any_native": [1]}
    if name == "vllm":  # no LoRA in this config: the engine gets lora=None and serves full weights
        want = {"lora": None, **want}
    assert calls == [(("/resolved", "bfloat16", "/t", False), want)]


def test_sglang_module_imports_without_sglang_and_names_the_extra():
    import importlib.util

    from relay.engines import sglang

    if importlib.util.find_spec("sglang") is not None:
        pytest.skip("sglang is installed here")
    with pytest.raises(ImportError, match=r"pip install 'relay\[sglang\]'"):
        sglang.SGLangEngine("/nowhere")


def test_a_stop_string_inside_a_token_ends_the_row_at_that_token():
    """A token may complete a stop string and carry text past it ("\n" inside ".\nThe"): the row
    ends at that token, as vLLM ends it, not at the call's max_tokens."""
    pieces = {1: "x", 2: "=", 3: "4.\nThe", 4: " end"}

    class Pieces:
        def decode(self, ids, **_):
            return "".join(pieces[i] for i in ids)

    engine = HFEngine.__new__(HFEngine)
    engine.tokenizer = Pieces()
    cut = engine._cut([1, 2, 3, 4], [-0.1, -0.2, -0.3, -0.4], set(), SamplingParams(stop=("\n",)))
    assert (cut.token_ids, cut.logprobs, cut.finish_reason) == ([1, 2, 3], [-0.1, -0.2, -0.3], "stop")


def test_long_rows_split_a_call_by_tokens_and_keep_their_order(engine, prompts, monkeypatch):
    assert hf.rows_per_call([[0] * 10] * 300, 6) == hf.GENERATE_CHUNK  # short rows: the row bound
    assert hf.rows_per_call([[0] * 1000], 128) == hf.GENERATE_TOKENS // 1128  # long rows: the token bound
    assert hf.rows_per_call([[0] * (hf.GENERATE_TOKENS + 1)], 1) == 1
    greedy = SamplingParams(n=2, temperature=0.0, max_tokens=6)
    whole = engine.generate(prompts, greedy)
    longest = max(len(p) for p in prompts) + greedy.max_tokens
    monkeypatch.setattr(hf, "GENERATE_TOKENS", 3 * longest)  # 3 rows a call: 12 rows in 4 calls
    split = engine.generate(prompts, greedy)
    assert [[c.token_ids for c in g] for g in split] == [[c.token_ids for c in g] for g in whole]


def test_greedy_calls_group_rows_of_like_length_and_sampled_calls_keep_their_order(monkeypatch):
    prompts = [[0] * n for n in (5, 50, 6, 40, 7, 45)]
    monkeypatch.setattr(hf, "GENERATE_TOKENS", 4 * (50 + 2))  # 4 rows a call: 6 rows in 2 calls
    assert hf.call_blocks(prompts, 2, by_length=False) == [[0, 1, 2, 3], [4, 5]]
    assert hf.call_blocks(prompts, 2, by_length=True) == [[0, 2, 4], [3, 5, 1]]  # 171 prefill tokens, not 290
    assert hf.call_blocks(prompts[:4], 2, by_length=True) == [[0, 1, 2, 3]]  # one call: nothing to gain
