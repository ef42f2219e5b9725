"""Atomic checkpoint save and verified load: tensors in safetensors, everything else in JSON.

No pickle anywhere (no torch.save): a checkpoint is data that anyone can read back without
running code from it, and resuming from a damaged one fails loudly instead of silently.

Layout of one checkpoint:

    root/step_00000012/
        policy.safetensors      one file per tensor group ("policy", "optimizer", "critic", ...)
        optimizer.safetensors
        state.json              step, data position, RNG states, config, KL controller state, ...
        manifest.json           written last: step, group names, size + sha256 of every file

A save is written into a hidden sibling `root/.tmp-step_00000012-<random>`, fsynced, then renamed
into place, so a crash at any moment leaves either the whole checkpoint or no visible folder.
A folder with a manifest is complete; `load_checkpoint` checks the manifest's names and entries
and re-checks every size and hash before reading a byte of tensor data (relay/checkpoint/manifest.py).
Pruning renames an old checkpoint to a hidden name before deleting it, so a crash mid-delete never
leaves a partial `step_*` folder; hidden leftovers of crashed saves and prunes are swept at the start
of every save and of a resume. One writer per root is assumed (the learner / driver).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where tensors are written or read: the driver imports this module,
    import torch  # and loads torch only when a checkpoint's tensors pass through it

from relay.checkpoint.manifest import (
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    STATE,
    STEP_DIR,
    bare_name_problem,
    verify_checkpoint,
)
from relay.checkpoint.manifest import sha256_file as _sha256
from relay.checkpoint.rng import restore_rng as restore_rng

_TMP_PREFIX = ".tmp-"
_PRUNE_PREFIX = ".tmp-pruned-"  # an old checkpoint between its rename and the end of its deletion


# ---------------------------------------------------------------------------------------------
# Save / load


def save_checkpoint(
    root: str | Path,
    step: int,
    groups: dict[str, dict[str, torch.Tensor] | bytes],
    state: dict,
    keep_last_n: int | None = None,
    write_shards: Callable[[Path], None] | None = None,
) -> Path:
    """Write `root/step_{step:08d}` atomically, then prune older checkpoints; returns its path.

    groups: name -> tensors, or the bytes of their safetensors file (group_bytes: made by the actor
    that holds them, so that the process writing the checkpoint needs no torch).
    keep_last_n: keep this many newest complete checkpoints (None keeps all). The checkpoint
    just written is never pruned, whatever its step number.
    write_shards: called with the temporary folder before the manifest is written, for state
    that others write there (a rank group's sharded checkpoint, relay/checkpoint/dcp.py); every
    file it leaves goes into the manifest.
    """
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be an int >= 0, got {step!r}")
    if keep_last_n is not None and (isinstance(keep_last_n, bool) or keep_last_n < 1):
        # 0 would mean "delete the checkpoint just written"; that is never what anyone wants.
        raise ValueError(f"keep_last_n must be None or >= 1, got {keep_last_n!r}")
    for name in groups:
        _check_group_name(name)
    # Fail on a non-JSON-able state before touching the disk, with json's own message.
    state_text = _dumps(state)

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    sweep_leftovers(root)  # first: the space a crashed save or prune held is free for this one
    final = root / f"step_{step:08d}"
    if final.exists():
        # Replacing a directory cannot be atomic; refusing keeps the old checkpoint intact.
        raise FileExistsError(f"{final} already exists; resume from it or choose another output folder")

    tmp = root / f"{_TMP_PREFIX}step_{step:08d}-{secrets.token_hex(4)}"
    tmp.mkdir()  # plain mkdir (not mkdtemp) so the folder gets the usual umask permissions
    try:
        files: dict[str, dict[str, Any]] = {}
        for name, tensors in groups.items():
            filename = f"{name}.safetensors"
            if isinstance(tensors, bytes):
                (tmp / filename).write_bytes(tensors)
            else:
                from safetensors.torch import save_file

                save_file(_detached_copies(tensors), str(tmp / filename))
            files[filename] = _fsync_and_describe(tmp / filename)
        _write_json(tmp / STATE, state_text)
        files[STATE] = _fsync_and_describe(tmp / STATE)
        if write_shards is not None:
            write_shards(tmp)
            for file in sorted(tmp.rglob("*")):
                if file.is_file() and (name := file.relative_to(tmp).as_posix()) not in files:
                    files[name] = _fsync_and_describe(file)
            for folder in tmp.rglob("*"):
                if folder.is_dir():
                    _fsync_dir(folder)
        manifest = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "step": step,
            "groups": list(groups),
            "files": files,
        }
        # The manifest goes last: its presence is what marks the checkpoint complete.
        _write_json(tmp / MANIFEST, _dumps(manifest))
        _fsync_path(tmp / MANIFEST)
        _fsync_dir(tmp)
        os.rename(tmp, final)
        _fsync_dir(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise

    _prune(root, keep_last_n, just_saved=final)
    return final


def group_bytes(groups: dict[str, dict[str, torch.Tensor]]) -> dict[str, bytes]:
    """Each group as the bytes of its safetensors file, the file save_checkpoint writes for it."""
    from safetensors.torch import save

    return {name: save(_detached_copies(tensors)) for name, tensors in groups.items()}


def sweep_leftovers(root: str | Path) -> None:
    """Delete what crashed saves and prunes left under root (hidden `.tmp-` folders)."""
    root = Path(root)
    if not root.is_dir():
        return
    for child in root.iterdir():
        if child.name.startswith((f"{_TMP_PREFIX}step_", _PRUNE_PREFIX)) and child.is_dir() and not child.is_symlink():
            _remove_leftover(child)


def latest_checkpoint(root: str | Path) -> Path | None:
    """The complete checkpoint with the highest step under root, or None."""
    checkpoints = list_checkpoints(root)
    return checkpoints[-1] if checkpoints else None


def list_checkpoints(root: str | Path) -> list[Path]:
    """Complete checkpoints (step folders holding a manifest) under root, oldest step first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = STEP_DIR.match(child.name)
        if match and child.is_dir() and (child / MANIFEST).is_file():
            found.append((int(match.group(1)), child))
    return [path for _, path in sorted(found)]


def load_checkpoint(path: str | Path) -> tuple[dict[str, dict[str, torch.Tensor]], dict]:
    """Verify the manifest, then read every group (as CPU tensors) and state.json."""
    path = Path(path)
    manifest = verify_checkpoint(path)
    from safetensors.torch import load_file

    groups = {name: load_file(str(path / f"{name}.safetensors"), device="cpu") for name in manifest["groups"]}
    state = json.loads((path / STATE).read_text(encoding="utf-8"))
    return groups, state


def save_hf_model(model: Any, tokenizer: Any, folder: str | Path) -> Path:
    """Write the final policy as a plain Hugging Face folder (safetensors weights), atomically.

    `model` must be an unwrapped transformers model on one process (gather FSDP / DDP first).
    `tokenizer` may be None. An existing folder is replaced: written beside it, then swapped.
    """
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.parent / f"{_TMP_PREFIX}{folder.name}-{secrets.token_hex(4)}"
    old = folder.parent / f"{_TMP_PREFIX}{folder.name}-old-{secrets.token_hex(4)}"
    try:
        # transformers >= 4.35 writes safetensors by default and 5.x has no switch for it.
        model.save_pretrained(tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        for file in tmp.rglob("*"):
            if file.is_file():
                _fsync_path(file)
        _fsync_dir(tmp)
        if folder.exists():
            # A directory cannot be replaced atomically; the gap between these two renames is
            # the only moment `folder` is absent, and the old copy is still on disk then.
            os.rename(folder, old)
        os.rename(tmp, folder)
        _fsync_dir(folder.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)
    return folder


# ---------------------------------------------------------------------------------------------
# Optimizer state <-> (tensors, JSON skeleton)
#
# A state_dict is a tree of dicts (int or str keys), lists, tuples, tensors and scalars. Tensors
# go to a flat dict for safetensors; the rest becomes JSON with small tags where JSON would lose
# information: a tensor's place, tuples (AdamW's betas), dicts with int keys (per-param state).

_TENSOR, _TUPLE, _ITEMS = "__tensor__", "__tuple__", "__items__"
_TAGS = {_TENSOR, _TUPLE, _ITEMS}


def flatten_optimizer_state(state_dict: dict) -> tuple[dict[str, torch.Tensor], dict]:
    """Split an optimizer (or scheduler) state_dict into named tensors and a JSON-able skeleton."""
    import torch

    tensors: dict[str, torch.Tensor] = {}

    def encode(value: Any, path: list[str]) -> Any:
        if isinstance(value, torch.Tensor):
            key = ".".join(path) or "tensor"
            while key in tensors:  # only if keys contain "." and collide; keep names unique
                key += "_"
            tensors[key] = value
            return {_TENSOR: key}
        if isinstance(value, dict):
            if all(isinstance(k, str) for k in value) and not _TAGS & set(value):
                return {k: encode(v, path + [k]) for k, v in value.items()}
            return {_ITEMS: [[encode(k, path), encode(v, path + [str(k)])] for k, v in value.items()]}
        if isinstance(value, tuple):
            return {_TUPLE: [encode(v, path + [str(i)]) for i, v in enumerate(value)]}
        if isinstance(value, list):
            return [encode(v, path + [str(i)]) for i, v in enumerate(value)]
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        raise TypeError(f"optimizer state at {'.'.join(path) or '<root>'}: cannot store {type(value).__name__}")

    skeleton = encode(state_dict, [])
    return tensors, skeleton


def unflatten_optimizer_state(tensors: dict[str, torch.Tensor], skeleton: dict) -> dict:
    """Inverse of flatten_optimizer_state: a state_dict that `optimizer.load_state_dict` accepts."""

    def decode(value: Any) -> Any:
        if isinstance(value, dict):
            if len(value) == 1 and _TENSOR in value:
                return tensors[value[_TENSOR]]
            if len(value) == 1 and _TUPLE in value:
                return tuple(decode(v) for v in value[_TUPLE])
            if len(value) == 1 and _ITEMS in value:
                return {decode(k): decode(v) for k, v in value[_ITEMS]}
            return {k: decode(v) for k, v in value.items()}
        if isinstance(value, list):
            return [decode(v) for v in value]
        return value

    return decode(skeleton)


# ---------------------------------------------------------------------------------------------
# Helpers


def _check_group_name(name: str) -> None:
    if problem := bare_name_problem(name):
        raise ValueError(f"bad checkpoint group name ({problem}): use a plain file-name stem like 'policy'")


def _detached_copies(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Fresh, contiguous CPU tensors, one storage each.

    safetensors refuses tensors that share storage (tied embeddings: lm_head.weight is
    embed_tokens.weight) and non-contiguous views; one copy into new memory fixes both and also
    snapshots GPU tensors onto the host.
    """
    import torch

    copies = {}
    for key, tensor in tensors.items():
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"checkpoint tensor {key!r} is a {type(tensor).__name__}, not a torch.Tensor")
        copies[key] = torch.empty(tensor.shape, dtype=tensor.dtype).copy_(tensor.detach())
    return copies


def _dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2)


def _write_json(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def _fsync_and_describe(path: Path) -> dict[str, Any]:
    _fsync_path(path)
    return {"size": path.stat().st_size, "sha256": _sha256(path)}


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    # Makes the renames / new entries durable. Some filesystems (certain network mounts) refuse
    # fsync on a directory; the data files themselves were already fsynced, so carry on.
    try:
        _fsync_path(path)
    except OSError:
        pass


def _prune(root: Path, keep_last_n: int | None, just_saved: Path) -> None:
    """Remove all but the newest keep_last_n complete checkpoints (never the one just saved).

    Each is first renamed to a hidden name, all renames made durable, then deleted: a crash
    mid-delete leaves a hidden leftover for sweep_leftovers, never a partial `step_*` folder
    that list_checkpoints would offer for resuming.
    """
    if keep_last_n is None:
        return
    doomed = []
    for path in list_checkpoints(root)[:-keep_last_n]:
        if path != just_saved:
            doomed.append(root / f"{_PRUNE_PREFIX}{path.name}-{secrets.token_hex(4)}")
            os.rename(path, doomed[-1])
    if doomed:
        _fsync_dir(root)
    for path in doomed:
        _remove_leftover(path)


def _remove_leftover(path: Path) -> None:
    try:
        shutil.rmtree(path)
    except OSError as error:
        # The checkpoint just saved is complete; a hidden leftover is retried at the next sweep.
        warnings.warn(f"could not delete {path} ({error}); it is retried at the next save or resume", stacklevel=3)
