"""Choosing the checkpoint `--resume` starts from, when the newest one may be damaged.

The newest complete checkpoint is verified and loaded. If it fails, the run does not start:
one line names it, its first problem, and the newest older checkpoint that verifies;
`checkpoint.fallback=true` resumes from that one instead (and says so).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from relay.checkpoint.atomic import list_checkpoints, load_checkpoint, sweep_leftovers
from relay.checkpoint.manifest import CheckpointCorruptError, verify_checkpoint
from relay.failures import RunFailed


class ResumeRefused(CheckpointCorruptError, RunFailed):
    """The newest checkpoint fails verification and no fallback was allowed (or none verifies).

    A CheckpointCorruptError (what it is) and a RunFailed (so the driver's entry point prints
    the one-line message and exits 1 instead of a traceback).
    """


def resume_checkpoint(root: str | Path, fallback: bool = False) -> tuple[Path, dict, dict] | None:
    """What --resume starts from: (path, groups, state) of the newest checkpoint, verified and
    loaded; None when root holds no complete checkpoint. Crash leftovers are swept first.

    If the newest fails verification, raises ResumeRefused (one line: which, why, and the newest
    that verifies). With `fallback`, loads that one instead and prints which; the failing newer
    ones are renamed `corrupt-step_*` (kept for a look; their step folders must be free for the
    resumed run to save those steps again).
    """
    root = Path(root)
    sweep_leftovers(root)
    candidates = list_checkpoints(root)[::-1]  # newest first
    if not candidates:
        return None
    try:
        return (candidates[0], *load_checkpoint(candidates[0]))
    except CheckpointCorruptError as error:
        problems = str(error).splitlines()
    more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
    message = f"--resume: the newest checkpoint {candidates[0]} fails verification: {problems[0]}{more}"
    for index, path in enumerate(candidates[1:], start=1):
        try:
            loaded = load_checkpoint(path) if fallback else verify_checkpoint(path)
        except CheckpointCorruptError:
            continue
        if not fallback:
            raise ResumeRefused(
                f"{message}; the newest that verifies is {path}: add checkpoint.fallback=true to resume from it"
            )
        aside = ", ".join(str(_move_aside(failed)) for failed in candidates[:index])
        print(f"relay: {message}; checkpoint.fallback=true: resuming from {path} (moved aside: {aside})")
        return (path, *loaded)
    raise ResumeRefused(f"{message}; no older checkpoint under {root} verifies")


def _move_aside(path: Path) -> Path:
    target = path.with_name(f"corrupt-{path.name}")
    if target.exists():
        target = path.with_name(f"corrupt-{path.name}-{secrets.token_hex(4)}")
    os.rename(path, target)
    return target
