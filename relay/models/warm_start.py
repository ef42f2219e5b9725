"""A short supervised warm start of the tiny model on a task's example episodes, built offline.

The tiny model (relay/models/tiny.py) only knows two-digit addition. For an agentic task it
first sees example trajectories from the task's environment class
(`warm_start_trajectories(n, seed) -> list[relay.agent.Trajectory]`), laid out token for token
as the agent loop lays out episodes (relay.agent.encode_trajectory), with loss on the model's
tokens only. The examples mix good and bad play, so RL starts from a model that knows the
format and is often wrong. The result is cached like the tiny model, keyed by the task, the
base model and the recipe.
"""
from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import torch

from relay.agent import ChatFormat, encode_trajectory
from relay.config import resolve_dotted
from relay.models.tiny import build_cached

BUILDER_VERSION = 1  # bump when the recipe changes, so stale caches are not reused


def task_model_path(env: str, base: str | Path, steps: int | None = None, batch: int = 32, lr: float = 3e-3,
                    seed: int = 0, cache_dir: Path | None = None) -> Path:
    """Folder of `base` fine-tuned on the examples of the environment class `env` (dotted path)."""
    env_cls = resolve_dotted(env)
    steps = steps if steps is not None else getattr(env_cls, "warm_start_steps", 300)
    base = Path(base)
    # The examples' fingerprint is in the key: changing how a task writes them rebuilds the model.
    sample = repr(env_cls.warm_start_trajectories(64, seed + 1_000_003)).encode()
    recipe = {"v": BUILDER_VERSION, "env": env, "base": base.name, "steps": steps, "batch": batch, "lr": lr, "seed": seed,
              "examples": hashlib.sha256(sample).hexdigest()[:16]}
    key = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]
    name = env.replace(":", ".").rsplit(".", 1)[-1].lower()
    folder = (cache_dir or base.parent) / f"tiny-{name}-{key}"
    return build_cached(folder, lambda: warm_start(base, env_cls, steps, batch, lr, seed), "relay_warm_start.json", recipe)


def warm_start(base: Path, env_cls, steps: int, batch: int, lr: float, seed: int):
    from relay.models.loading import load_model, load_tokenizer

    torch.manual_seed(seed)
    tokenizer = load_tokenizer(str(base))
    model = load_model(str(base))
    fmt = ChatFormat(tokenizer)
    examples = [encode_trajectory(fmt, t) for t in env_cls.warm_start_trajectories(steps * batch, seed + 1_000_003)]
    random.Random(seed).shuffle(examples)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=steps, pct_start=0.1)
    pad = tokenizer.pad_token_id
    model.train()
    for step in range(steps):
        chunk = examples[step * batch:(step + 1) * batch]
        seqs = [p + r for p, r, _ in chunk]
        labels = [[-100] * len(p) + [t if m else -100 for t, m in zip(r, mask)] for p, r, mask in chunk]
        width = max(map(len, seqs))
        ids = torch.tensor([s + [pad] * (width - len(s)) for s in seqs])
        lab = torch.tensor([lb + [-100] * (width - len(lb)) for lb in labels])
        attn = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs])
        loss = model(input_ids=ids, attention_mask=attn, labels=lab).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
    model.eval()
    return model, tokenizer
