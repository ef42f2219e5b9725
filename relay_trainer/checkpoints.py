"""Checkpoints of the roles that train (learner, critic), written and read the same way for one
actor or a rank group.

One actor's weights and optimizer travel to the driver as safetensors bytes and go into the step's
safetensors groups (relay/checkpoint/atomic.py). A rank group writes its own shards with
torch.distributed.checkpoint into `<step>/<role>/` inside the step's temporary folder, before the
manifest that marks the checkpoint complete (relay/checkpoint/dcp.py): no rank's weights pass
through the driver. On a cluster of several nodes that folder must be on a file system every rank
and the driver share. Every call has the deadline resources.update_timeout_s (Supervisor.get).
"""

from __future__ import annotations

from pathlib import Path

from relay.checkpoint.atomic import save_checkpoint
from relay_trainer.learner_recovery import restores_learner
from relay_trainer.rank_group import RankGroup

TRAINED_ROLES = ("learner", "critic")


@restores_learner("checkpoint")
def save_training_checkpoint(actors, root: Path, step: int, state: dict, keep_last_n: int | None) -> Path:
    """The step's checkpoint: `state` (the driver's) plus every trained role's, written atomically."""
    tensors, sharded, get = {}, {}, actors.faults.get
    for role in TRAINED_ROLES:
        handle = getattr(actors, role)
        if isinstance(handle, RankGroup):
            sharded[role], state[role] = handle, {"shards": role}
        elif handle is not None:
            # as safetensors bytes: tensors unpickled here would load torch into the driver
            role_tensors, state[role] = get(handle.state.remote(as_bytes=True), handle, "checkpoint state", long=True)
            tensors.update(role_tensors)
    if getattr(actors, "reward_model", None) is not None:  # its running score statistics: exact resume
        state["reward_model"] = actors.reward_model.state_dict()

    def write_shards(folder: Path) -> None:
        refs = [handle.save_shards.remote(str(folder / role)) for role, handle in sharded.items()]
        get(refs, list(sharded.values()), "checkpoint shards save", long=True)

    return save_checkpoint(
        root, step, tensors, state, keep_last_n=keep_last_n, write_shards=write_shards if sharded else None
    )


@restores_learner("final save")
def save_final_model(actors, folder: str, tokenizer_path: str) -> None:
    """The learner's weights and the tokenizer as a Hugging Face model folder (checkpoint.save_hf_model)."""
    actors.faults.get(actors.learner.save_hf.remote(folder, tokenizer_path), actors.learner, "save_hf", long=True)


def load_training_checkpoint(actors, path: Path, groups: dict, state: dict) -> None:
    """Give every trained role its state from the checkpoint at `path` (verified by load_checkpoint).
    Shards written by N ranks load on any number of ranks, or on one actor."""
    if getattr(actors, "reward_model", None) is not None:
        actors.reward_model.load_state_dict(state.get("reward_model", {}))
    for role in TRAINED_ROLES:
        handle, meta = getattr(actors, role), state.get(role)
        if handle is None or meta is None:
            continue
        if "shards" in meta:
            shards = str(Path(path) / meta["shards"])
            actors.faults.get(handle.load_shards.remote(shards), handle, "checkpoint load", long=True)
        elif isinstance(handle, RankGroup):
            raise ValueError(
                f"{path}: the {role} was saved by one actor (safetensors); a rank group resumes only from "
                f"sharded checkpoints: resume with resources.{role}.count=1"
            )
        else:
            actors.faults.get(handle.load_state.remote(groups, meta), handle, "checkpoint load", long=True)
