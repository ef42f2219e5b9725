"""The tiny built-in model's recipe: a ~0.8M-parameter Qwen2 causal LM and its supervised warm start.

The built model is shipped in the repository (relay/models/shipped/); this module is how it was
made, run by `python -m relay.models.build`, never at training time.

The warm start is fitted to convergence on 2-digit addition in which a carry out of the ones
digit is kept only `carry_keep_rate` of the time; otherwise the answer "forgets" it (17+25 -> 32).
Fitted to convergence, the model learns that distribution, which does not depend on float
details: greedy answers are right exactly on the problems without a ones carry (about 55% of
them) and sampled answers carry about `carry_keep_rate` of the time. RL then has one visible
skill to learn (carrying), and GRPO groups on carry problems are mixed from the first step.
A warm start stopped part-way up the learning curve instead gave a different model on every
machine: the jump from 5% to 80% accuracy moved by hundreds of steps with seed and float order.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from relay.envs.arithmetic import make_rows, parse_answer
from relay.models.tokenizer import build_tiny_tokenizer


@dataclass(frozen=True)
class TinySpec:
    seed: int = 0
    hidden_size: int = 128
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    intermediate_size: int = 384
    tie_word_embeddings: bool = True  # like Qwen2.5-0.5B; exercises the tied-embedding sync paths
    warm_start_steps: int = 1000  # fixed: past the point where the fit stops changing (one-cycle schedule)
    warm_start_batch: int = 64
    warm_start_lr: float = 2e-3
    carry_keep_rate: float = 0.3
    digits: int = 2


def has_ones_carry(prompt: str) -> bool:
    a, b = (int(x) for x in prompt.split("+"))
    return a % 10 + b % 10 >= 10


def warm_start_rows(spec: TinySpec) -> list[dict]:
    """Addition rows whose ones carry is dropped from the answer (1 - carry_keep_rate) of the time."""
    rng = random.Random(spec.seed)
    rows = make_rows(spec.warm_start_steps * spec.warm_start_batch, seed=spec.seed + 1_000_003, digits=spec.digits)
    return [
        dict(row, ground_truth=str(int(row["ground_truth"]) - 10))
        if has_ones_carry(row["prompt"]) and rng.random() >= spec.carry_keep_rate
        else row
        for row in rows
    ]


def build_tiny_model(spec: TinySpec = TinySpec()):
    """(model, tokenizer), built from `spec` alone: the same spec and machine give the same bits."""
    tokenizer = build_tiny_tokenizer()
    torch.manual_seed(spec.seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        num_key_value_heads=spec.kv_heads,
        max_position_embeddings=512,
        tie_word_embeddings=spec.tie_word_embeddings,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    model = Qwen2ForCausalLM(config)
    warm_start(model, tokenizer, spec)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def encode_chat(tokenizer, prompt: str) -> list[int]:
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
    )
    return tokenizer(text, add_special_tokens=False).input_ids


def warm_start(model, tokenizer, spec: TinySpec) -> None:
    """Supervised fine-tuning on answers only (prompt tokens carry no loss), `warm_start_steps` steps."""
    rows = warm_start_rows(spec)
    optimizer = torch.optim.AdamW(model.parameters(), lr=spec.warm_start_lr, weight_decay=0.0)
    # The learning rate decays to ~0, so the last steps only settle the fit instead of moving it.
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=spec.warm_start_lr, total_steps=max(spec.warm_start_steps, 1), pct_start=0.05
    )
    model.train()
    for step in range(spec.warm_start_steps):
        chunk = rows[step * spec.warm_start_batch : (step + 1) * spec.warm_start_batch]
        seqs, labels = [], []
        for row in chunk:
            prompt = encode_chat(tokenizer, row["prompt"])
            answer = tokenizer(row["ground_truth"], add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
            seqs.append(prompt + answer)
            labels.append([-100] * len(prompt) + answer)
        width = max(map(len, seqs))
        ids = torch.tensor([s + [tokenizer.pad_token_id] * (width - len(s)) for s in seqs])
        lab = torch.tensor([lb + [-100] * (width - len(lb)) for lb in labels])
        loss = model(input_ids=ids, attention_mask=(lab != -100) | (ids != tokenizer.pad_token_id), labels=lab).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
    model.eval()


@torch.no_grad()
def greedy_accuracy(model, tokenizer, rows) -> tuple[float, float]:
    """(exact-answer rate, well-formed rate) of greedy answers."""
    model.eval()
    prompts = [encode_chat(tokenizer, row["prompt"]) for row in rows]
    width = max(map(len, prompts))
    ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(p)) + p for p in prompts])
    out = model.generate(
        input_ids=ids,
        attention_mask=(ids != tokenizer.pad_token_id).long(),
        max_new_tokens=6,
        do_sample=False,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    answers = [parse_answer(t) for t in tokenizer.batch_decode(out[:, width:], skip_special_tokens=True)]
    right = sum(a == row["ground_truth"] for a, row in zip(answers, rows))
    return right / len(rows), sum(a is not None for a in answers) / len(rows)
