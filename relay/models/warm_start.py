"""A short supervised warm start of the tiny model on a task's example episodes.

The tiny model (relay/models/tiny.py) only knows two-digit addition. For an agentic task it
first sees example trajectories from the task's environment class
(`warm_start_episodes(n, seed) -> list[relay.envs.chat.ScriptedEpisode]`), laid out token for token
as the agent loop lays out episodes (relay.envs.chat.encode_scripted), with loss on the model's
tokens only. The examples mix good and bad play, so RL starts from a model that knows the
format and is often wrong. The built-in tasks' results are shipped (relay/models/shipped/);
`python -m relay.models.build --env my_pkg.envs:MyEnv --out DIR` makes one for a user's task.
"""

from __future__ import annotations

import random
from pathlib import Path

import torch

from relay.envs.chat import ChatFormat, encode_scripted

DEFAULT_STEPS = 300  # for an environment class without a `warm_start_steps` attribute


def warm_start(base: Path, env_cls, steps: int | None = None, batch: int = 32, lr: float = 3e-3, seed: int = 0):
    """(model, tokenizer): the model in folder `base` fine-tuned on `env_cls`'s example episodes."""
    from relay.models.loading import load_model, load_tokenizer

    steps = steps if steps is not None else getattr(env_cls, "warm_start_steps", DEFAULT_STEPS)
    torch.manual_seed(seed)
    tokenizer = load_tokenizer(str(base))
    model = load_model(str(base))
    fmt = ChatFormat(tokenizer)
    examples = [encode_scripted(fmt, t) for t in env_cls.warm_start_episodes(steps * batch, seed + 1_000_003)]
    random.Random(seed).shuffle(examples)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=steps, pct_start=0.1)
    pad = tokenizer.pad_token_id
    model.train()
    for step in range(steps):
        chunk = examples[step * batch : (step + 1) * batch]
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
