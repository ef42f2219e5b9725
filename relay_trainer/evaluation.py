"""In-run held-out evaluation beside training (training.eval_every in training.mode one_step_off /
async): its episodes are sent to the rollout workers and the loop goes on training; the result is
read at a later step boundary, once back, and logged with that step's metrics as eval/* plus
eval/weights_version (read from the samples) and eval/lag_steps (how many steps after the one
whose weights it measured). In sync mode the loop evaluates in place, as `evaluate` does.

The worker is a serial actor: the evaluation's calls queue behind the producer's calls in flight
and before the next weight sync, so they run on the weights of the step that started them (a
lost worker's shard is redone on the replacement, on the weights current then: the version is
read from the samples, never assumed). When the loop waits, and why:
- one evaluation at a time: a new one first takes the one out, so results come back in order and
  a step's record holds at most one;
- a step that checkpoints (the last one too) takes the one out first, so a checkpoint leaves none
  behind that a resumed run would never log; its own evaluation is started and waited for as in
  sync mode, unless an earlier one came back in its record: then it is skipped, and said so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from relay.config import TrainingConfig
from relay.config.role_settings import HeldOutSettings
from relay.run import metric_keys as keys
from relay_trainer.steps import held_out_metrics, rollout_results, start_evaluation


@dataclass
class PendingEvaluation:
    """An evaluation out on the rollout workers."""

    step: int  # the step after which it started: the weights it measures
    calls: object  # ready() without waiting, results() waited for (actors.supervision.PendingCalls)


class OverlappedEvaluation:
    def __init__(
        self,
        every: int,
        start: Callable[[int], object],
        measure: Callable[[list], dict[str, float]],
        say: Callable[[str], None] = lambda line: print(line, flush=True),
    ):
        """`start(step)` sends an evaluation of the weights of `step`; `measure(results)` makes its
        eval/* metrics, eval/weights_version among them, from what its calls returned."""
        self.every, self.start, self.measure, self.say = every, start, measure, say
        self.pending: PendingEvaluation | None = None

    @property
    def measuring(self) -> int | None:
        """The step whose weights the evaluation out measures; None when none is out."""
        return None if self.pending is None else self.pending.step

    def after_step(self, step: int, checkpoint: bool) -> dict[str, float]:
        """The eval/* metrics to log with `step` (1-based; its weights just sent to the workers): the
        evaluation out, once back (waited for when this step starts one or checkpoints), and this
        step's evaluation started (and at a checkpoint waited for)."""
        evaluates = step % self.every == 0
        out = self.collect(step, wait=checkpoint or evaluates)
        if evaluates and checkpoint and out:
            self.say(
                f"relay: held-out evaluation of step {step} skipped: the one of step {step - out[keys.EVAL_LAG_STEPS]:.0f} "
                "came back with this step, which checkpoints (one result per step's metrics)"
            )
        elif evaluates:
            self.pending = PendingEvaluation(step, self.start(step))
            if checkpoint:
                out = self.collect(step, wait=True)
        return out

    def collect(self, step: int, wait: bool) -> dict[str, float]:
        """The evaluation out, as metrics to log with `step`, if it is back (or `wait`); else {}."""
        pending = self.pending
        if pending is None or not (wait or pending.calls.ready()):
            return {}
        self.pending = None
        return {**self.measure(pending.calls.results()), keys.EVAL_LAG_STEPS: float(step - pending.step)}


def overlapped_evaluation(
    training: TrainingConfig, held_out: HeldOutSettings, actors, rows: list[dict]
) -> OverlappedEvaluation | None:
    """The run's evaluation beside training: training.eval_every in one_step_off / async, else None."""
    if training.mode == "sync" or not training.eval_every:
        return None

    def measure(results: list) -> dict[str, float]:
        samples, _ = rollout_results(actors, results)  # faults/* counted, as a blocking rollout's
        version = min((s.weight_version for s in samples), default=float("nan"))
        return {**held_out_metrics(held_out, samples), keys.EVAL_WEIGHTS_VERSION: float(version)}

    return OverlappedEvaluation(training.eval_every, lambda step: start_evaluation(actors, rows, version=step), measure)
