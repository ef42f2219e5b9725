"""How the driver's step runs its phases on the actors, decided once at start-up (`step_plan`).

A step's phases, in the loop's order (relay_trainer/loop.py train_step): take samples (rolled out
and scored) -> what the advantages need (reference logprobs, values, old logprobs) -> update ->
weight sync.
`ActorCalls` makes the calls of each phase on separate actors, its samples rolled out now
(`collect`) or by the producer while earlier steps trained (training.mode one_step_off / async);
`OneCall` is a colocated sync step with nothing to do between rollout and update: one actor
call runs both (`rollout_and_update`), the loop's other branch.
"""

from __future__ import annotations

import statistics
from typing import Protocol

import ray

from relay.config import Config
from relay.config.resolved import BEFORE_UPDATE
from relay.config.role_settings import HeldOutSettings, ProducerSettings, StepSettings
from relay.envs.data import PromptIterator
from relay.envs.reasoning_gym import by_dataset, unparsed_metrics
from relay.envs.scoring import trainable
from relay.envs.textarena import invalid_move_metrics
from relay.failures import step_failures
from relay.run import metric_keys as keys
from relay.run.step_metrics import PhaseTimer, eval_metrics, merge_rollout_metrics, split
from relay.types import Sample
from relay.update.dapo import mixed_groups, punish_overlong
from relay_trainer.learner_recovery import restores_learner
from relay_trainer.lora_reference import LearnerAsReference
from relay_trainer.pools import Actors
from relay_trainer.producer import RolloutProducer
from relay_trainer.reward_model_pool import score_with_reward_model
from relay_trainer.supervised_calls import critic_update, reference_logprobs
from relay_trainer.weights import sleep_engines, sync_weights

# ---------------------------------------------------------------------------------------------
# rollouts and their scores


def rollout(actors, rows: list[dict], seed_round: int, greedy: bool = False, first_group_id: int = 0):
    """Shard prompts over the rollout workers; one group id per prompt across the whole batch.
    `seed_round` seeds sampling, so a resumed run samples exactly what the first run did."""
    return rollout_results(actors, start_rollout(actors, rows, seed_round, greedy, first_group_id).results())


def start_rollout(actors, rows: list[dict], seed_round: int, greedy=False, first_group_id=0, since=None):
    """`rollout`'s shards sent and not waited for (supervised as they are: Supervisor.start_rollout_shards)."""
    shards = split(rows, len(actors.rollout))
    return actors.faults.start_rollout_shards(  # a lost shard is redone, same seed, on the worker's replacement
        actors.rollout,
        lambda i, w, **seed: w.rollout.remote(  # seed: a lost worker's seed index, its shard redone on w
            shards[i], seed_round, first_group_id=first_group_id + i * len(shards[i]), greedy=greedy, **seed
        ),
        restore=actors.recovery.restore_replacement if actors.colocated else None,
        since=since,
    )


def rollout_results(actors, results: list) -> tuple[list[Sample], dict[str, float]]:
    results = actors.faults.shard_results(results)
    return [s for shard_samples, _ in results for s in shard_samples], merge_rollout_metrics([m for _, m in results])


def count_failures(samples: list[Sample], games: bool = False) -> dict[str, float]:
    """The rollout workers return their samples scored (the reward function in-process, or on the
    EnvPool that ran the episode); failed ones keep 0 and say why. Counts the failures; in a mix of
    datasets (task.datasets), the mean reward of each (reward/<dataset>); in games (task.name=textarena),
    the invalid moves; in reasoning-gym rows, the replies the verifier could not read (reward/unparsed,
    wrong answers rather than failures)."""
    errors = float(sum(s.reward_error is not None for s in samples))
    per_dataset = by_dataset(samples, "reward/{}", statistics.fmean)
    moves = invalid_move_metrics(samples, "env/", games)
    unparsed = unparsed_metrics(samples, "reward/unparsed")
    return {"reward/errors": errors, **step_failures(samples), **per_dataset, **moves, **unparsed}


def score(settings: StepSettings, actors, samples: list[Sample]) -> dict[str, float]:
    """A rollout's samples, scored by the workers: reward-model scores into the rewards, failures
    counted (the rule's and the RM's alike); with DAPO's overlong buffer, the long ones punished."""
    metrics, a = score_with_reward_model(actors, samples), settings.algorithm  # reward_model.*
    metrics.update(count_failures(samples, games=settings.games))
    if a.overlong_buffer_len:  # DAPO soft overlong punishment
        punish_overlong(samples, settings.max_new_tokens, a.overlong_buffer_len, a.overlong_penalty)
    return metrics


@restores_learner("evaluation")
def evaluate(actors, held_out: HeldOutSettings, rows: list[dict]) -> dict[str, float]:
    """Held-out greedy episodes: accuracy, or for environment tasks mean return and success rate."""
    rows = rows[: len(rows) - len(rows) % len(actors.rollout)]
    samples, _ = rollout(actors, rows, seed_round=0, greedy=True)  # scored by the workers
    return held_out_metrics(held_out, samples)


def start_evaluation(actors, rows: list[dict], version: int):
    """`evaluate`'s episodes sent, on weights `version` or newer, and not waited for (training.mode
    one_step_off / async: relay_trainer/evaluation.py); held_out_metrics reads their samples."""
    rows = rows[: len(rows) - len(rows) % len(actors.rollout)]
    return start_rollout(actors, rows, seed_round=0, greedy=True, since=version)


def held_out_metrics(held_out: HeldOutSettings, samples: list[Sample]) -> dict[str, float]:
    task = held_out.task
    metrics = eval_metrics(task, [s.reward for s in samples])
    solved = lambda rewards: eval_metrics(task, rewards)["eval/accuracy"]  # noqa: E731
    metrics.update(by_dataset(samples, "eval/{}/accuracy", solved))  # a mix of datasets: each one's
    metrics.update(invalid_move_metrics(samples, "eval/", task.name == "textarena"))
    metrics.update(unparsed_metrics(samples, "eval/unparsed"))
    # how often the model reaches for its tools, next to how often it is right (task.agent: the calls
    # the endpoint read from the replies, which the program ran)
    if held_out.tool_calls:
        episodes = max(len(samples), 1)
        metrics["eval/tool_calls_per_episode"] = sum(len(s.tool_calls) for s in samples) / episodes
        metrics["eval/tool_errors_per_episode"] = sum(not c["ok"] for s in samples for c in s.tool_calls) / episodes
        metrics["eval/turns_per_episode"] = sum(s.meta.get("agent", {}).get("turns", 1) for s in samples) / episodes
        metrics["eval/problems"] = float(len(samples))  # how many held-out problems the numbers score
    return metrics


def sampling_round(settings: StepSettings, step: int, attempt: int = 0) -> int:
    """The rollout's seed round: one per try of every step, so a resumed run samples as the first did."""
    return step * settings.algorithm.dynamic_sampling_max_tries + attempt


def collect(settings: StepSettings, actors, prompts: PromptIterator, step: int):
    """Roll out and score one batch. With DAPO dynamic sampling, groups whose rewards are all
    equal carry no signal: drop them and draw more prompts, at most `dynamic_sampling_max_tries`."""
    a, want, group_size = settings.algorithm, settings.prompts_per_step, settings.group_size
    kept, metrics = [], {"dapo/groups_dropped": 0.0}
    for attempt in range(a.dynamic_sampling_max_tries if a.dynamic_sampling else 1):
        samples, metrics_rollout = rollout(
            actors, prompts.take(want), sampling_round(settings, step, attempt), first_group_id=attempt * want
        )
        tools = {
            k: metrics.get(k, 0.0) + metrics_rollout[k] for k in keys.TOOL_COUNTS if k in metrics_rollout
        }  # every try's calls
        metrics.update(metrics_rollout, **tools, **score(settings, actors, samples))
        if not a.dynamic_sampling:
            return samples, metrics
        mixed = mixed_groups(samples)
        metrics["dapo/groups_dropped"] += (len(samples) - sum(mixed)) / group_size
        kept += [s for s, keep in zip(samples, mixed) if keep]
        if len(kept) >= want * group_size:
            break
    metrics["dapo/tries"] = attempt + 1.0
    # all groups flat after every try: train on the last batch
    return kept[: want * group_size] or samples, metrics


# ---------------------------------------------------------------------------------------------
# the step's phases


class StepPlan(Protocol):
    """The phases of one step, called in this order; each times itself on `timer`."""

    def take_samples(self, step: int, timer: PhaseTimer) -> tuple[list[Sample], dict[str, float]]: ...
    def advantage_inputs(self, samples: list[Sample], timer: PhaseTimer) -> dict: ...
    def update(self, inputs: dict, timer: PhaseTimer) -> dict[str, float]: ...
    def sync_weights(self, version: int) -> None: ...
    def state_dict(self) -> dict | None: ...


class ActorCalls:
    """Each phase its own calls: the rollout workers', then the reference's, the critic's and the
    learner's. With a producer the samples were rolled out while earlier steps trained, and the
    weight sync is not waited for."""

    def __init__(
        self, settings: StepSettings, actors, prompts: PromptIterator, kl_ctl, producer: RolloutProducer | None
    ):
        self.settings, self.actors, self.prompts = settings, actors, prompts
        self.kl_ctl, self.producer = kl_ctl, producer
        self.inputs_restores = 0  # the learner restores before this step's advantage inputs were made

    def take_samples(self, step, timer):
        actors, producer = self.actors, self.producer
        with timer("rollout"):  # the learner waits for its data here
            found = collect(self.settings, actors, self.prompts, step) if producer is None else producer.take()
        if actors.rollout_sleeps:  # free the engines' GPU memory for the learner; the weight sync wakes them
            sleep_engines(actors)
        return found

    def advantage_inputs(self, samples, timer):
        """The update calls' arguments: the trainable samples, put once in the object store for
        every actor that reads them, and object refs to what their Batch's advantages need."""
        actors = self.actors
        trained = trainable(samples)  # no reward, no gradient: a NaN never reaches the advantages
        step_ref = ray.put(trained) if actors.reference is not None or actors.critic else trained
        with timer("reference"):
            refs = self._advantage_refs(step_ref)
        self.inputs_restores = actors.recovery.restores
        return {"step": step_ref, **refs}

    @restores_learner("logprobs")
    def _advantage_refs(self, step_ref) -> dict:
        actors = self.actors
        refs = self.learner_inputs(step_ref)
        handles = [actors.learner] * len(refs)
        if actors.critic:
            refs["values"] = actors.critic.compute_values.remote(step_ref)
            handles.append(actors.critic)
        if actors.reference is not None and "ref_logprobs" not in refs:
            refs["ref_logprobs"] = reference_logprobs(actors, step_ref)
            handles.append(actors.reference)
        actors.faults.wait(list(refs.values()), handles, "logprobs and values", long=True)
        return refs

    def learner_inputs(self, step_ref) -> dict:
        """What the learner makes of the advantage inputs: old logprobs (unless its update finds
        them), and with LoRA the reference logprobs (its base model, adapters off)."""
        refs = {}
        if self.settings.old_logprobs == BEFORE_UPDATE:
            refs["old_logprobs"] = self.actors.learner.compute_logprobs.remote(step_ref)
        if isinstance(self.actors.reference, LearnerAsReference):
            refs["ref_logprobs"] = self.actors.reference.compute_logprobs.remote(step_ref)
        return refs

    def update(self, inputs, timer):
        """The learner's (and the critic's) update; metrics with the batch's reward/mean, ...
        Its arguments are kept until the next checkpoint, for a later restore to replay."""
        actors, kwargs = self.actors, {"kl_coef": self.kl_ctl.value, **inputs}
        with timer("update"):
            critic = actors.critic.update.remote(**kwargs) if actors.critic else None
            updates = [self._learner_update(kwargs)]
            actors.recovery.keep(**kwargs)
            if critic is not None:
                restored = actors.recovery.restores > self.inputs_restores
                updates.append(critic_update(actors, critic, kwargs, learner_restored=restored))
        return {k: v for m in updates for k, v in m.items()}

    @restores_learner("update")
    def _learner_update(self, kwargs: dict) -> dict[str, float]:
        actors = self.actors
        if actors.recovery.restores > self.inputs_restores:  # the lost learner's logprobs may be its death
            kwargs.update(self.learner_inputs(kwargs["step"]))
        return actors.faults.get(actors.learner.update.remote(**kwargs), actors.learner, "update", long=True)

    @restores_learner("weight sync")
    def sync_weights(self, version):
        if self.producer is None:
            sync_weights(self.actors, version)
        else:  # each worker loads it after its calls in flight; later calls run on it
            self.producer.sync_weights(version)

    @restores_learner("checkpoint")
    def state_dict(self):
        """The producer's groups and calls (it first finishes the calls in flight, which draw prompts)."""
        return None if self.producer is None else self.producer.state_dict()


class OneCall:
    """A colocated sync step in one call (one round trip instead of two; the samples cross once).
    The actor rolls out, then updates on the trainable samples, finding its own old logprobs,
    and times both phases."""

    def __init__(self, settings: StepSettings, actors, prompts: PromptIterator, kl_ctl):
        self.settings, self.actors, self.prompts, self.kl_ctl = settings, actors, prompts, kl_ctl

    def rollout_and_update(self, step: int, timer: PhaseTimer) -> tuple[list[Sample], dict, dict[str, float]]:
        """(samples, their rollout metrics, the update's metrics)."""
        actors, called = self.actors, timer.elapsed()
        rows, seed_round = self.prompts.take(self.settings.prompts_per_step), sampling_round(self.settings, step)
        kl_coef = self.kl_ctl.value
        samples, rollout_metrics, update_metrics, seconds = self._one_call(rows, seed_round, kl_coef)
        actors.recovery.keep(trainable(samples), kl_coef=kl_coef)  # what the call's update trained on
        actors.faults.add({k: v for k, v in rollout_metrics.items() if k.startswith("faults/")})
        timer.seconds.update(seconds)
        # timed in the actor, one after the other: placed from the call's start (its round trip not known)
        timer.starts.update(
            {keys.phase_start("rollout"): called, keys.phase_start("update"): called + seconds[keys.ROLLOUT_S]}
        )
        sample_metrics = {**merge_rollout_metrics([rollout_metrics]), **count_failures(samples, self.settings.games)}
        return samples, sample_metrics, update_metrics

    @restores_learner("step")  # a learner lost in it: restored, the same rows rolled out with the same seed
    def _one_call(self, rows: list[dict], seed_round: int, kl_coef: float) -> tuple:
        call = self.actors.learner.rollout_and_update.remote(rows, seed_round, kl_coef)
        return self.actors.faults.get(call, self.actors.learner, "step", long=True)

    def sync_weights(self, version):
        sync_weights(self.actors, version)  # the update tagged the shared module's weights: no copy

    def state_dict(self):
        return None


def one_call_steps(cfg: Config, actors: Actors) -> bool:
    """resources.colocate with nothing to do between the rollout and the update: no reward model,
    reference, critic or DAPO, and no environment pool (whose lost shard the driver redoes)."""
    a = cfg.algorithm
    between = actors.reward_model or actors.reference or actors.critic or actors.env
    return actors.colocated and not (between or a.dynamic_sampling or a.overlong_buffer_len)


def step_plan(cfg: Config, actors, prompts: PromptIterator, kl_ctl, start_step: int, pipeline: dict | None) -> StepPlan:
    """The step's plan for this run's layout and training.mode, with the settings its phases read."""
    settings = StepSettings.of(cfg)
    if cfg.training.mode != "sync":  # one_step_off / async: groups rolled out while earlier steps train
        scored = lambda samples: score(settings, actors, samples)  # noqa: E731
        producer = RolloutProducer(ProducerSettings.of(cfg), actors, prompts, scored, start_step, pipeline)
        actors.recovery.on_restore.append(producer.forget_learner_calls)  # they died with the lost learner
        return ActorCalls(settings, actors, prompts, kl_ctl, producer)
    if one_call_steps(cfg, actors):  # colocated, nothing between the rollout and the update
        return OneCall(settings, actors, prompts, kl_ctl)
    return ActorCalls(settings, actors, prompts, kl_ctl, None)
