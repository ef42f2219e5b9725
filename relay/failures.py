"""A run that trains on nothing stops and says why, instead of exiting 0 or crashing later.

Each step's failures are counted data (env/errors, reward/errors, actor/skipped_steps); the watch
stops the run when a step was entirely failures for `training.stop_after_failed_steps` steps in
a row: every episode ended in an environment error, every reward was an error, or the learner
skipped its optimizer step because the loss or the gradient norm was not finite.
"""

from __future__ import annotations

import re

from relay.types import FinishReason, Sample

PRINTED_IN_FULL = 3  # failures of one kind shown whole per process; later ones one line at 10, 100, 1000, ...


def print_failure(count: int, full: str, short: str) -> None:
    """Rate-limited: the `count`-th failure of its kind prints `full` while count <= PRINTED_IN_FULL,
    then `short` only at powers of ten, so a run of thousands of errors stays readable."""
    if count <= PRINTED_IN_FULL:
        print(full, flush=True)
    elif str(count).strip("0") == "1":
        print(short, flush=True)


class RunFailed(RuntimeError):
    """The run cannot go on; the message names the cause and what to look at."""


class ActorLost(RunFailed):
    """An actor died for good (a learner rank, or a restartable role out of restarts). The run
    stops at once; `run_dir` (set on the way out of the run) names where its checkpoints are."""

    def __init__(self, message: str, run_dir=None):
        super().__init__(message)
        self.run_dir = run_dir


class CallRaised(ActorLost):
    """A call of the learner, reference, critic or colocated worker raised: their state may be
    half-changed, so the run stops as for a lost learner (last checkpoint, resumable)."""


class LearnerRestarted(RuntimeError):
    """Raised by a learner that Ray rebuilt after a loss, until the driver restores its state."""


def step_failures(samples: list[Sample]) -> dict[str, float]:
    """env/errors: episodes the environment ended by raising; reward/errors is counted by the scorer."""
    return {"env/errors": float(sum(s.finish_reason == FinishReason.ENV_ERROR for s in samples))}


def last_error(samples: list[Sample], attr: str) -> str:
    for s in reversed(samples):
        err = s.reward_error if attr == "reward" else s.meta.get("env", {}).get("error")
        if err:
            return err.strip().splitlines()[0]
    return ""


class FailureWatch:
    def __init__(self, limit: int):
        self.limit = limit
        self.streaks = {"env": 0, "reward": 0, "update": 0}

    def check(self, samples: list[Sample], metrics: dict[str, float]) -> None:
        """Raises RunFailed once one kind of failure has filled `limit` steps in a row."""
        n = len(samples)
        failed = {
            "env": n > 0 and metrics.get("env/errors", 0.0) >= n,
            "reward": n > 0 and metrics.get("reward/errors", 0.0) >= n,
            "update": metrics.get("actor/skipped_steps", 0.0) > 0 and metrics.get("actor/optimizer_steps", 0.0) == 0,
        }
        for kind, bad in failed.items():
            self.streaks[kind] = self.streaks[kind] + 1 if bad else 0
        if self.limit <= 0:
            return
        k = self.limit
        if self.streaks["env"] >= k:
            raise RunFailed(
                f"every episode ended in an environment error for {k} steps in a row; the last: "
                f"{last_error(samples, 'env')} (task.env; the first tracebacks are printed above)"
            )
        if self.streaks["reward"] >= k:
            raise RunFailed(
                f"the reward function failed on every sample for {k} steps in a row; the last: "
                f"{last_error(samples, 'reward')} (task.reward_fn)"
            )
        if self.streaks["update"] >= k:
            cause = "loss" if metrics.get("actor/skipped_nonfinite_loss", 0.0) else "gradient norm"
            raise RunFailed(
                f"the learner skipped every optimizer step for {k} steps in a row: the {cause} was not finite; "
                "the weights are those of the last good step (lower training.lr, or check the rewards)"
            )


def raised_line(error: Exception) -> str:
    """What a remote call raised, in one line: the exception's type and message, not Ray's traceback."""
    cause = getattr(error, "cause", None) or error
    return f"{type(cause).__name__}: {(str(cause).strip().splitlines() or [''])[0]}"[:300]


def actor_error_line(error: Exception) -> str:
    """Which actor died (its name, `<run>/<role>-<i>`, and class) and Ray's first line on why."""
    text = str(error).strip()
    name, cls = re.search(r"\bname: (\S+)", text), re.search(r"\bclass_name: (\S+)", text)
    who = " ".join(x for x in (name and name.group(1), cls and f"({cls.group(1)})") if x)
    why = text.splitlines()[0][:300] if text else type(error).__name__
    return f"{who}: {why}" if who else why
