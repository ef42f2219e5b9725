"""GPU tier: skipped as a whole unless CUDA is available (plain `pytest` needs no GPU).

Shared pieces for the engine tests: a Qwen2.5-0.5B-shaped Qwen2 model with random weights and
tied embeddings, built locally (no network), with a locally built tokenizer whose vocabulary
covers all 151936 ids (the tiny character tokenizer plus filler tokens), so any sampled id
decodes; and the Engine contract checks both engines run.
"""

from __future__ import annotations

import pytest
import torch

from tests.engine_checks import logprob_diff


def pytest_collection_modifyitems(config, items):
    here = __file__.rsplit("/", 1)[0]
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.gpu)
            if not torch.cuda.is_available():
                item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))


VOCAB = 151936


def build_full_vocab_tokenizer():
    """The tiny tokenizer's vocabulary and chat template, padded with filler tokens to VOCAB ids."""
    import string

    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    from relay.models.tokenizer import CHAT_TEMPLATE, IM_END, PAD, SPECIAL_TOKENS

    chars = [c for c in string.printable if c not in "\x0b\x0c\r"]
    base = SPECIAL_TOKENS + chars + [f"<0x{b:02X}>" for b in range(256)]
    vocab = {tok: i for i, tok in enumerate(base + [f"<x{i}>" for i in range(len(base), VOCAB)])}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], byte_fallback=True, fuse_unk=False))
    core.add_special_tokens(SPECIAL_TOKENS)
    core.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()])
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        eos_token=IM_END,
        unk_token=None,
        chat_template=CHAT_TEMPLATE,
        model_max_length=2048,
        clean_up_tokenization_spaces=False,
    )


@pytest.fixture(scope="session")
def qwen05b_path(tmp_path_factory):
    """Qwen2Config as Qwen2.5-0.5B (hidden 896, 24 layers, 14 heads, 2 KV heads, MLP 4864, vocab
    151936, tied embeddings), random weights from a fixed seed, saved in bf16."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    folder = tmp_path_factory.mktemp("qwen05b-random")
    tokenizer = build_full_vocab_tokenizer()
    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        rope_theta=1_000_000.0,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="session")
def gpu_prompts(qwen05b_path):
    from relay.envs.arithmetic import make_rows
    from relay.models.loading import load_tokenizer
    from relay.models.tiny import encode_chat

    tokenizer = load_tokenizer(qwen05b_path)
    return [encode_chat(tokenizer, row["prompt"]) for row in make_rows(8, seed=7, digits=3)]


@pytest.fixture(scope="module")
def gpu_learner(qwen05b_path):
    from relay.models.loading import load_model

    return load_model(qwen05b_path, "bfloat16").cuda().eval()


class Contract:
    """Engine contract checks shared by the vLLM-CUDA and SGLang tests."""

    logprob_diff = staticmethod(logprob_diff)  # (max, mean) |engine - learner| logprob

    @staticmethod
    def check_generation(engine, prompts) -> None:
        from relay.engines.base import SamplingParams

        eos = engine.tokenizer.eos_token_id
        sampling = SamplingParams(n=3, temperature=1.0, max_tokens=12, seed=3)
        groups = engine.generate(prompts, sampling)
        assert len(groups) == len(prompts) and all(len(g) == 3 for g in groups)
        for c in (c for g in groups for c in g):
            assert 1 <= len(c.token_ids) <= 12 and len(c.logprobs) == len(c.token_ids)
            assert c.finish_reason in ("stop", "length")
            assert c.finish_reason == "stop" or len(c.token_ids) == 12
            assert eos not in c.token_ids[:-1]
        greedy = SamplingParams(n=1, temperature=0.0, max_tokens=8)
        base = [g[0].token_ids for g in engine.generate(prompts, greedy)]
        stop_id = base[0][2]
        out = engine.generate(
            prompts[:1], SamplingParams(n=1, temperature=0.0, max_tokens=8, stop_token_ids=(stop_id,))
        )[0][0]
        assert out.token_ids == base[0][: base[0].index(stop_id) + 1] and out.finish_reason == "stop"
        stop_text = engine.tokenizer.decode(base[0][2:3])
        out = engine.generate(prompts[:1], SamplingParams(n=1, temperature=0.0, max_tokens=8, stop=(stop_text,)))[0][0]
        assert out.finish_reason == "stop" and engine.tokenizer.decode(out.token_ids).endswith(stop_text)
        top1 = engine.generate(prompts, SamplingParams(n=1, temperature=1.0, top_k=1, max_tokens=8, seed=5))
        assert [g[0].token_ids for g in top1] == base
        short = engine.generate(prompts, SamplingParams(n=2, temperature=1.0, max_tokens=1, seed=1))
        assert all(len(c.token_ids) == 1 for g in short for c in g)

    @staticmethod
    def check_seeds(engine, prompts) -> None:
        from relay.engines.base import SamplingParams

        sampling = SamplingParams(n=4, temperature=1.0, max_tokens=8, seed=11)
        a, b = engine.generate(prompts, sampling), engine.generate(prompts, sampling)
        assert [[c.token_ids for c in g] for g in a] == [[c.token_ids for c in g] for g in b]
        assert len({tuple(c.token_ids) for g in a for c in g}) > 1

    @staticmethod
    def perturbed(model, seed: int, scale: float = 0.5):
        """(a perturbed copy of model, its state as read-only fp32 numpy arrays, as the Learner
        sends it). Parameters are perturbed once each, so tied names stay identical."""
        import copy

        new = copy.deepcopy(model)
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in new.parameters():
                noise = torch.randn(p.shape, generator=generator) * scale * p.float().std().clamp(min=1e-3).item()
                p.add_(noise.to(p.device, p.dtype))
        state = {}
        for name, t in new.state_dict().items():
            array = t.float().cpu().numpy()
            array.flags.writeable = False
            state[name] = array
        return new.eval(), state


@pytest.fixture(scope="session")
def contract():
    return Contract
