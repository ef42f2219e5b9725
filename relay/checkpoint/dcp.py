"""Sharded checkpoints of a rank group's model and optimizer: torch.distributed.checkpoint (DCP).

Each role writes one folder inside the step's temporary checkpoint folder (relay.checkpoint.atomic.
save_checkpoint's `write_shards`): DCP writes every rank's shard as its own file, rank 0 adds
DCP's `.metadata` after all ranks finished, and each rank adds `rank_<r>.json` (its RNG and the
learning-rate schedule). The manifest that marks the checkpoint complete is written after every
rank returned, so a crash between shard writes leaves a temporary folder that no reader takes
for a checkpoint. DCP's `.metadata` is a pickle written and read by torch itself; the manifest's
sizes and hashes cover it like every other file.

State dicts are keyed by parameter names (torch.distributed.checkpoint.state_dict), not by rank
or shard, so a checkpoint written by N ranks loads on M ranks (DCP reshards) and on a plain
one-process model (no process group: DCP reads it without collectives).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
import torch.distributed as dist

# torch.distributed.checkpoint is imported by the functions that use it: it pulls in FSDP,
# DTensor and sympy (seconds, ~40 MB), which every process importing the learner would pay.


def _trained_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    """get_state_dict without frozen parameters (a LoRA model's base, relay/models/lora.py: model.path
    holds them); ignore_frozen_params alone keeps the second name of a tied frozen weight
    (lm_head.weight tied to the embeddings)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer, options=StateDictOptions(ignore_frozen_params=True))
    frozen = {name for name, p in model.named_parameters(remove_duplicate=False) if not p.requires_grad}
    return {k: v for k, v in model_state.items() if k not in frozen}, optimizer_state


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def save_shards(folder: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, extra: dict) -> None:
    """Every rank of the group calls this with the same folder: its shard of the model and the
    optimizer state, and `extra` (JSON-able) as rank_<r>.json. Returns when every rank is done."""
    import torch.distributed.checkpoint as dcp

    folder = Path(folder)
    model_state, optimizer_state = _trained_state(model, optimizer)
    dcp.save(
        {"model": model_state, "optimizer": optimizer_state},
        checkpoint_id=str(folder),
        no_dist=not dist.is_initialized(),
    )
    path = folder / f"rank_{_rank()}.json"
    with open(path, "w", encoding="utf-8") as f:
        json.dump(extra, f)
        f.flush()
        os.fsync(f.fileno())
    if dist.is_initialized():
        dist.barrier()


def load_shards(folder: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """Read the model and optimizer state saved by save_shards (by any number of ranks) into this
    rank's shards; returns this rank's `extra` (rank 0's when the saving group was smaller)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

    folder = Path(folder)
    model_state, optimizer_state = _trained_state(model, optimizer)
    state = {"model": model_state, "optimizer": optimizer_state}
    dcp.load(state, checkpoint_id=str(folder), no_dist=not dist.is_initialized())
    # Not strict: frozen parameters stay as loaded; dcp.load has already required every trained tensor.
    keep_frozen = StateDictOptions(ignore_frozen_params=True, strict=False)
    set_state_dict(
        model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"], options=keep_frozen
    )
    path = folder / f"rank_{_rank()}.json"
    return json.loads((path if path.is_file() else folder / "rank_0.json").read_text(encoding="utf-8"))
