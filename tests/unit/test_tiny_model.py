"""The built-in model and tokenizer: offline, reproducible, loadable as any HF folder."""

import torch
from transformers import AutoTokenizer

from relay.engines.base import SamplingParams
from relay.engines.hf import HFEngine
from relay.models.tokenizer import build_tiny_tokenizer
from relay.types import Batch, Sample
from relay.update.policy import response_logprobs


def test_tokenizer_round_trips_under_auto_tokenizer(tiny_model_path):
    built, loaded = build_tiny_tokenizer(), AutoTokenizer.from_pretrained(tiny_model_path)
    text = loaded.apply_chat_template(
        [{"role": "user", "content": "12+34"}], add_generation_prompt=True, tokenize=False
    )
    assert text == "<|im_start|>user\n12+34<|im_end|>\n<|im_start|>assistant\n"
    for s in [text, "héllo ✓ 12\n  x\t{\"a\": 'b'}"]:
        ids = built(s, add_special_tokens=False).input_ids
        assert ids == loaded(s, add_special_tokens=False).input_ids
        assert loaded.decode(ids) == s


def test_step0_engine_and_learner_logprobs_agree(tiny_model_path):
    """The contract's bound: max |rollout logprob - learner logprob| < 1e-3 in fp32."""
    engine = HFEngine(tiny_model_path)
    tok = engine.tokenizer
    prompts = [
        tok(
            tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False),
            add_special_tokens=False,
        ).input_ids
        for p in ["1+2", "45+67", "99+9"]
    ]
    groups = engine.generate(prompts, SamplingParams(n=4, temperature=0.9, max_tokens=6, seed=0))
    samples = [
        Sample(prompt_ids=p, response_ids=c.token_ids, rollout_logprobs=c.logprobs, loss_mask=[1] * len(c.token_ids))
        for p, group in zip(prompts, groups)
        for c in group
    ]
    batch = Batch.from_samples(samples, pad_id=0)
    with torch.no_grad():
        learner, _ = response_logprobs(engine.model, batch, temperature=0.9)
    diff = ((learner - batch.rollout_logprobs).abs() * batch.loss_mask).max().item()
    print(f"step-0 max |engine - learner| logprob difference: {diff:.2e}")
    assert diff < 1e-3
