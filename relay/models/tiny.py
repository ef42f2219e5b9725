"""The tiny built-in model: a ~1M-parameter Qwen2 causal LM with a short supervised warm start.

Built offline from a seed, cached on disk (reproducible), so `python driver.py` needs no network.
The warm start teaches the answer format on the built-in addition task but stops early, so RL
starts from a model that answers in the right format and is often wrong.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from relay.envs.arithmetic import make_rows
from relay.models.tokenizer import build_tiny_tokenizer

BUILDER_VERSION = 3  # bump when the recipe changes, so stale caches are not reused


@dataclass(frozen=True)
class TinySpec:
    seed: int = 0
    hidden_size: int = 128
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    intermediate_size: int = 384
    tie_word_embeddings: bool = True  # like Qwen2.5-0.5B; exercises the tied-embedding sync paths
    warm_start_steps: int = 1500  # upper bound; it stops once target_accuracy is reached
    warm_start_batch: int = 64
    warm_start_lr: float = 2e-3
    # Stop the warm start once greedy answers on held-out rows are this often right (and nearly
    # always well-formed): RL then starts from a model that knows the format and is often wrong.
    # Measured, not a fixed step count: accuracy jumps steeply with steps and the jump moves
    # with floating-point details, so a fixed count gave anywhere from 5% to 88%.
    target_accuracy: float = 0.3
    digits: int = 2


def default_cache_dir() -> Path:
    return Path(os.environ.get("RELAY_CACHE", Path.home() / ".cache" / "relay"))


def tiny_model_path(spec: TinySpec = TinySpec(), cache_dir: Path | None = None) -> Path:
    """Folder of the built model; builds it on first use (about a minute on 2 cores)."""
    key = hashlib.sha256(json.dumps({"v": BUILDER_VERSION, **asdict(spec)}, sort_keys=True).encode()).hexdigest()[:12]
    folder = (cache_dir or default_cache_dir()) / f"tiny-qwen2-{key}"
    return build_cached(folder, lambda: build_tiny_model(spec), "relay_tiny_spec.json", asdict(spec))


def build_cached(folder: Path, build, recipe_file: str, recipe: dict) -> Path:
    """`folder` if built already; else `build() -> (model, tokenizer)` saved there atomically."""
    if (folder / "config.json").exists():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=folder.parent))
    try:
        model, tokenizer = build()
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / recipe_file).write_text(json.dumps(recipe, indent=1))
        try:
            os.rename(tmp, folder)  # atomic: a concurrent builder's identical result may have won
        except OSError:
            if not (folder / "config.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def build_tiny_model(spec: TinySpec):
    tokenizer = build_tiny_tokenizer()
    torch.manual_seed(spec.seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=spec.hidden_size, intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.layers, num_attention_heads=spec.heads, num_key_value_heads=spec.kv_heads,
        max_position_embeddings=512, tie_word_embeddings=spec.tie_word_embeddings,
        bos_token_id=None, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    model = Qwen2ForCausalLM(config)
    steps = warm_start(model, tokenizer, spec)
    model.config.relay_warm_start_steps = steps  # recorded in config.json for provenance
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def encode_chat(tokenizer, prompt: str) -> list[int]:
    text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False)
    return tokenizer(text, add_special_tokens=False).input_ids


def warm_start(model, tokenizer, spec: TinySpec) -> int:
    """Supervised fine-tuning on answers only (prompt tokens carry no loss). Returns steps taken."""
    rows = make_rows(spec.warm_start_steps * spec.warm_start_batch, seed=spec.seed + 1_000_003, digits=spec.digits)
    held_out = make_rows(128, seed=spec.seed + 2_000_003, digits=spec.digits)
    optimizer = torch.optim.AdamW(model.parameters(), lr=spec.warm_start_lr, weight_decay=0.0)
    warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 50))
    step = -1  # warm_start_steps=0: an untrained model (benchmarks want random weights)
    for step in range(spec.warm_start_steps):
        model.train()
        chunk = rows[step * spec.warm_start_batch:(step + 1) * spec.warm_start_batch]
        seqs, labels = [], []
        for row in chunk:
            prompt = encode_chat(tokenizer, row["prompt"])
            answer = tokenizer(row["ground_truth"], add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
            seqs.append(prompt + answer)
            labels.append([-100] * len(prompt) + answer)
        width = max(map(len, seqs))
        ids = torch.tensor([s + [tokenizer.pad_token_id] * (width - len(s)) for s in seqs])
        lab = torch.tensor([l + [-100] * (width - len(l)) for l in labels])
        loss = model(input_ids=ids, attention_mask=(lab != -100) | (ids != tokenizer.pad_token_id), labels=lab).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        warmup.step()
        if (step + 1) % 20 == 0:
            accuracy, well_formed = greedy_accuracy(model, tokenizer, held_out)
            if accuracy >= spec.target_accuracy and well_formed >= 0.9:
                break
    model.eval()
    return step + 1


@torch.no_grad()
def greedy_accuracy(model, tokenizer, rows) -> tuple[float, float]:
    """(exact-answer rate, well-formed rate) of greedy answers."""
    from relay.envs.arithmetic import parse_answer

    model.eval()
    prompts = [encode_chat(tokenizer, row["prompt"]) for row in rows]
    width = max(map(len, prompts))
    ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(p)) + p for p in prompts])
    out = model.generate(input_ids=ids, attention_mask=(ids != tokenizer.pad_token_id).long(), max_new_tokens=6, do_sample=False,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    answers = [parse_answer(t) for t in tokenizer.batch_decode(out[:, width:], skip_special_tokens=True)]
    right = sum(a == row["ground_truth"] for a, row in zip(answers, rows))
    return right / len(rows), sum(a is not None for a in answers) / len(rows)
