"""A run whose learner (or another actor, for good) died: one line, and `resources.auto_resume`.

The line names the last complete checkpoint and the exact `--resume` command. With
`resources.auto_resume: N` the driver itself resumes from that checkpoint, up to N times in one
process (Ray stays up; the lost run's actors and placement groups were freed on the way out),
so no job has to resubmit itself. Steps after the checkpoint are redone from its saved state
(data position, RNG, optimizer), which is what `--resume` does: none is lost, none counted twice
in the weights.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from relay.checkpoint.atomic import latest_checkpoint
from relay.failures import ActorLost, CallRaised, RunFailed
from relay.run.stop import resume_command


def lost_line(lost: ActorLost, argv: list[str], program: str = "driver.py") -> str:
    """What died, the last complete checkpoint, and the command that goes on from it."""
    run_dir = Path(lost.run_dir) if lost.run_dir is not None else None
    ckpt = latest_checkpoint(run_dir / "checkpoints") if run_dir is not None else None
    saved = f"last complete checkpoint {ckpt}" if ckpt else "no checkpoint yet (resuming starts over)"
    resume = resume_command(argv, run_dir, program) if run_dir is not None else "(the run folder was not made yet)"
    what = "a call failed" if isinstance(lost, CallRaised) else "an actor died"
    return f"{what}: {lost}; {saved}; resume: {resume}"


def train_with_auto_resume(
    train: Callable[..., dict],
    cfg,
    resume: bool,
    argv: list[str],
    config_named: Callable[[str], object],
    log: Callable[[str], None] = print,
    program: str = "driver.py",
) -> dict:
    """train(cfg, resume=...), resumed from the last checkpoint after an ActorLost, at most
    cfg.resources.auto_resume times. `config_named(name)` is the same config with run.name set to
    the lost run's folder name (a fresh run may have been given `<name>-1`). Out of tries: RunFailed
    whose message is the line."""
    tries = cfg.resources.auto_resume
    for attempt in range(tries + 1):
        try:
            return train(cfg, resume=resume)
        except ActorLost as lost:
            line = lost_line(lost, argv, program)
            if attempt >= tries or lost.run_dir is None:
                raise RunFailed(line) from lost
            log(f"relay: {line}")
            log(f"relay: auto_resume {attempt + 1}/{tries}: resuming {Path(lost.run_dir).name} in this driver")
            cfg, resume = config_named(Path(lost.run_dir).name), True
    raise AssertionError("unreachable")
