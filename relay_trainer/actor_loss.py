"""An actor lost for good stops the run, resumably: the driver's context around a run
(relay_trainer/loop.py). The deadlines and retries that come before it are actors/supervision.py."""

from __future__ import annotations

from ray.exceptions import OutOfMemoryError, RayActorError

from relay.failures import ActorLost, actor_error_line


class actor_loss_stops:
    """Context manager around a run: an actor that died for good (a learner rank; a restartable
    role out of restarts) leaves as relay.failures.ActorLost naming the run folder, which the
    driver turns into one line with the last checkpoint and the `--resume` command."""

    def __init__(self, run_dir):
        self.run_dir = run_dir

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None and issubclass(exc_type, ActorLost):
            # raised in an actor (a rollout worker whose pool is gone), Ray's error wraps it as `cause`
            lost = getattr(exc, "cause", exc)
            raise type(lost)(str(lost), self.run_dir) from exc
        if exc_type is not None and issubclass(exc_type, RayActorError):
            raise ActorLost(actor_error_line(exc), self.run_dir) from exc
        if exc_type is not None and issubclass(
            exc_type, OutOfMemoryError
        ):  # Ray's memory monitor killed a call's worker
            raise ActorLost(f"killed for memory: {str(exc).strip().splitlines()[0][:300]}", self.run_dir) from exc
        return False
