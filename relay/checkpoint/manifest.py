"""A checkpoint's manifest.json: what a complete one holds, and checking a folder against it.

The manifest is read back from disk, so it is treated as untrusted input: before any file it
names is opened, every name must be a bare file name inside the checkpoint folder (no path
separator, no `..`, nothing absolute or hidden), every file entry must carry an integer size and
a sha256 hex digest, and every tensor group plus state.json must be listed. Only then is each
file checked: a regular file (not a symbolic link), of the listed size and hash.

    {"format": "relay-checkpoint", "version": 1, "step": 12,
     "groups": ["policy", "optimizer"],
     "files": {"policy.safetensors": {"size": 123, "sha256": "<64 hex>"}, ..., "state.json": {...}}}
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
STATE = "state.json"
FORMAT = "relay-checkpoint"
FORMAT_VERSION = 1
STEP_DIR = re.compile(r"^step_(\d+)$")
_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")


class CheckpointCorruptError(RuntimeError):
    """A checkpoint on disk does not match its manifest (missing, truncated or altered file), or
    the manifest itself is malformed (a name that leaves the folder, an incomplete entry)."""


def bare_name_problem(name: Any) -> str | None:
    """Why `name` is not a plain file name that stays inside its folder, or None if it is."""
    if not isinstance(name, str):
        return f"{name!r} is not a string"
    if not name:
        return "empty name"
    if name.startswith(("/", "\\")):
        return f"{name!r} is an absolute path"
    if ".." in re.split(r"[/\\]", name):
        return f"{name!r} contains '..'"
    if "/" in name or "\\" in name:
        return f"{name!r} contains a path separator"
    if "\x00" in name:
        return f"{name!r} contains a NUL byte"
    if name.startswith("."):
        return f"{name!r} is a hidden name"
    return None


# torch.distributed.checkpoint's index of a sharded role's files (relay/checkpoint/dcp.py): the one
# hidden name a manifest may list, and only inside a role's folder.
SHARD_METADATA = ".metadata"


def entry_name_problem(name: Any) -> str | None:
    """Why `name` cannot be a manifest's file entry, or None: a bare name, or `<role>/<bare name>`
    for a rank group's shards (one folder level, the folder itself bare; its file may be
    SHARD_METADATA)."""
    problem = bare_name_problem(name)
    if problem is None or not problem.endswith("contains a path separator") or name.count("/") != 1 or "\\" in name:
        return problem
    folder, file = name.split("/")
    return bare_name_problem(folder) or (None if file == SHARD_METADATA else bare_name_problem(file))


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def manifest_problems(manifest: Any, folder: Path) -> list[str]:
    """Everything malformed in a parsed manifest (names, completeness, types); empty if sound.

    Only the manifest is looked at, never the files it names, so nothing on disk is touched
    because of a hostile entry.
    """
    if not isinstance(manifest, dict):
        return [f"top level is a {type(manifest).__name__}, not an object"]
    problems = []
    if manifest.get("format") != FORMAT or manifest.get("version") != FORMAT_VERSION:
        problems.append(
            f"format {manifest.get('format')!r} version {manifest.get('version')!r}, "
            f"expected {FORMAT!r} version {FORMAT_VERSION}"
        )
    step = manifest.get("step")
    folder_step = STEP_DIR.match(folder.name)
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        problems.append(f"step {step!r} is not an int >= 0")
    elif folder_step and int(folder_step.group(1)) != step:
        problems.append(f"step {step} does not match the folder name {folder.name}")

    groups = manifest.get("groups")
    if not isinstance(groups, list):
        problems.append(f"groups {groups!r} is not a list")
        groups = []
    if len({g for g in groups if isinstance(g, str)}) != len(groups):
        problems.append("groups has repeated or non-string names")
    for group in groups:
        if problem := bare_name_problem(group):
            problems.append(f"group name {problem}")

    files = manifest.get("files")
    if not isinstance(files, dict):
        problems.append(f"files is a {type(files).__name__}, not an object")
        files = {}
    for filename, entry in files.items():
        if problem := entry_name_problem(filename):
            problems.append(f"file name {problem}")
            continue
        if not isinstance(entry, dict):
            problems.append(f"{filename}: entry is not an object")
            continue
        size = entry.get("size")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            problems.append(f"{filename}: size {size!r} is not an int >= 0")
        digest = entry.get("sha256")
        if not isinstance(digest, str) or not _SHA256_HEX.match(digest):
            problems.append(f"{filename}: sha256 {digest!r} is not 64 lowercase hex digits")
    for filename in [f"{g}.safetensors" for g in groups if isinstance(g, str)] + [STATE]:
        if filename not in files:
            problems.append(f"{filename}: not listed")
    return problems


def verify_checkpoint(path: str | Path) -> dict:
    """Check the manifest, then every file it lists (regular file, size, sha256); return it.

    Raises CheckpointCorruptError naming every problem, one per line.
    """
    path = Path(path)
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise CheckpointCorruptError(f"{manifest_path}: missing (not a complete checkpoint)")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as error:
        raise CheckpointCorruptError(f"{manifest_path}: unreadable manifest ({error}) (checkpoint corrupt)") from None
    if malformed := manifest_problems(manifest, path):
        raise CheckpointCorruptError("\n".join(f"{manifest_path}: {p} (checkpoint corrupt)" for p in malformed))

    problems = []
    for filename, expected in manifest["files"].items():
        file = path / filename
        if file.is_symlink() or file.parent.is_symlink():
            # A link could point anywhere on the machine; save_checkpoint never writes one.
            problems.append(f"{file}: a symbolic link, not a regular file (checkpoint corrupt)")
            continue
        if not file.is_file():
            problems.append(f"{file}: missing (listed in the manifest)")
            continue
        size = file.stat().st_size
        if size != expected["size"]:
            problems.append(f"{file}: size {size} bytes, manifest says {expected['size']} (truncated or corrupt)")
            continue
        if sha256_file(file) != expected["sha256"]:
            problems.append(f"{file}: sha256 mismatch (checkpoint corrupt)")
    if problems:
        raise CheckpointCorruptError("\n".join(problems))
    return manifest
