"""relay's RL loop, top to bottom. `python driver.py [--config X.yaml] [--resume] [key=value ...]`

prompts -> rollout -> rewards -> reference logprobs -> update (the learner builds the Batch and the
advantages from the samples) -> weight sync -> log -> checkpoint. Every arrow is an object ref
moving between Ray actors; the driver's process holds plain Python and never loads torch.
"""

from __future__ import annotations

if __name__ == "__main__":  # the imports below take seconds; the first line should not wait for them
    print("relay: starting (importing ray) ...", flush=True)

import random
import sys

import ray

from actors.checkpoints import load_training_checkpoint, save_training_checkpoint
from actors.metrics import publish as publish_ray_metrics
from actors.pools import actor_pools, connect, one_call_steps
from actors.producer import RolloutProducer
from actors.reward_model import score_with_reward_model
from actors.supervision import actor_loss_stops
from actors.weights import sleep_engines, sync_weights
from relay.checkpoint.rng import capture_rng, restore_rng
from relay.config import Config
from relay.envs.data import PromptIterator
from relay.envs.scoring import trainable
from relay.failures import FailureWatch, step_failures
from relay.run import metric_keys as keys
from relay.run.command_line import run_command_line
from relay.run.folder import (
    PhaseTimer,
    create_run_folder,
    eval_metrics,
    merge_rollout_metrics,
    resolve_model_path,
    run_folder,
    split,
    summarize,
    task_rows,
)
from relay.run.loggers import make_loggers
from relay.run.pipeline import pipeline_metrics
from relay.run.progress import phase
from relay.run.resume import resume_checkpoint
from relay.run.samples import SampleWriter
from relay.run.stop import StopOnSignal
from relay.update.dapo import mixed_groups, punish_overlong
from relay.update.kl_control import driver_needs_old_logprobs, make_kl_controller


def rollout(actors, rows: list[dict], seed_round: int, greedy: bool = False, first_group_id: int = 0):
    """Shard prompts over the rollout workers; one group id per prompt across the whole batch.
    `seed_round` seeds sampling, so a resumed run samples exactly what the first run did."""
    shards = split(rows, len(actors.rollout))
    results = actors.faults.rollout_shards(  # a lost shard is redone, same seed, on the worker's replacement
        actors.rollout,
        lambda i, w: w.rollout.remote(
            shards[i], seed_round, first_group_id=first_group_id + i * len(shards[i]), greedy=greedy
        ),
    )
    return [s for shard_samples, _ in results for s in shard_samples], merge_rollout_metrics([m for _, m in results])


def score(samples) -> dict[str, float]:
    """The rollout workers return their samples scored (the reward function in-process, or on the
    EnvPool that ran the episode); failed ones keep 0 and say why. Counts the failures."""
    return {"reward/errors": float(sum(s.reward_error is not None for s in samples)), **step_failures(samples)}


def evaluate(cfg: Config, actors, rows: list[dict]) -> dict[str, float]:
    """Held-out greedy episodes: accuracy, or for environment tasks mean return and success rate."""
    rows = rows[: len(rows) - len(rows) % len(actors.rollout)]
    samples, _ = rollout(actors, rows, seed_round=0, greedy=True)  # scored by the workers
    return eval_metrics(cfg.task, [s.reward for s in samples])


def finish(cfg: Config, actors, samples) -> dict[str, float]:
    """A rollout's samples, scored by the workers: reward-model scores into the rewards, failures
    counted (the rule's and the RM's alike); with DAPO's overlong buffer, the long ones punished."""
    metrics, a = score_with_reward_model(actors, samples), cfg.algorithm  # reward_model.*
    metrics.update(score(samples))
    if a.overlong_buffer_len:  # DAPO soft overlong punishment
        punish_overlong(samples, cfg.rollout.max_new_tokens, a.overlong_buffer_len, a.overlong_penalty)
    return metrics


def sampling_round(cfg: Config, step: int, attempt: int = 0) -> int:
    """The rollout's seed round: one per try of every step, so a resumed run samples as the first did."""
    return step * cfg.algorithm.dynamic_sampling_max_tries + attempt


def collect(cfg: Config, actors, prompts: PromptIterator, step: int):
    """Roll out and score one batch. With DAPO dynamic sampling, groups whose rewards are all
    equal carry no signal: drop them and draw more prompts, at most `dynamic_sampling_max_tries`."""
    a, want = cfg.algorithm, cfg.training.prompts_per_step
    kept, metrics = [], {"dapo/groups_dropped": 0.0}
    for attempt in range(a.dynamic_sampling_max_tries if a.dynamic_sampling else 1):
        samples, metrics_rollout = rollout(
            actors, prompts.take(want), sampling_round(cfg, step, attempt), first_group_id=attempt * want
        )
        tools = {
            k: metrics.get(k, 0.0) + metrics_rollout[k] for k in keys.TOOL_COUNTS if k in metrics_rollout
        }  # every try's calls
        metrics.update(metrics_rollout, **tools, **finish(cfg, actors, samples))
        if not a.dynamic_sampling:
            return samples, metrics
        mixed = mixed_groups(samples)
        metrics["dapo/groups_dropped"] += (len(samples) - sum(mixed)) / cfg.rollout.n
        kept += [s for s, keep in zip(samples, mixed) if keep]
        if len(kept) >= want * cfg.rollout.n:
            break
    metrics["dapo/tries"] = attempt + 1.0
    # all groups flat after every try: train on the last batch
    return kept[: want * cfg.rollout.n] or samples, metrics


def rollout_and_update(cfg: Config, actors, prompts: PromptIterator, step: int, kl_ctl, timer: PhaseTimer):
    """A sync step in one call to the colocated actor (one round trip instead of two; the samples
    cross once). The actor times the rollout and the update; the driver's timer takes its seconds."""
    call = actors.learner.rollout_and_update.remote(
        prompts.take(cfg.training.prompts_per_step), sampling_round(cfg, step), kl_ctl.value
    )
    samples, rollout_metrics, update_metrics, seconds = actors.faults.get(call, actors.learner, "step", long=True)
    actors.faults.add({k: v for k, v in rollout_metrics.items() if k.startswith("faults/")})
    timer.seconds.update(seconds)
    return samples, {**merge_rollout_metrics([rollout_metrics]), **score(samples)}, update_metrics


def rollout_then_update(cfg: Config, actors, prompts: PromptIterator, step: int, kl_ctl, timer: PhaseTimer, producer):
    """The step's samples (rolled out now, or by the producer while earlier steps trained), what
    their advantages need, and the update: the samples, their metrics and the update's."""
    with timer("rollout"):  # the learner waits for its data here
        samples, sample_metrics = collect(cfg, actors, prompts, step) if producer is None else producer.take()
    if actors.rollout_sleeps:  # free the engines' GPU memory for the learner; the weight sync wakes them
        sleep_engines(actors)
    # The samples go once to every actor that builds the step's Batch (relay/update/batch.py): the
    # learner finds the advantages inside `update`. Old logprobs come first only for a KL penalty
    # in the reward (relay/update/old_logprobs.py); the critic needs them too.
    kl_in_reward = driver_needs_old_logprobs(cfg.algorithm, has_reference=actors.reference is not None)
    trained = trainable(samples)  # no reward, no gradient: a NaN never reaches the advantages
    step_ref = ray.put(trained) if actors.reference is not None or actors.critic else trained
    with timer("reference"):  # what the advantages need; it stays in the object store for the update calls
        inputs, handles = {}, []
        if kl_in_reward:
            inputs["old_logprobs"] = actors.learner.compute_logprobs.remote(step_ref)
            handles.append(actors.learner)
        if actors.critic:
            inputs["values"] = actors.critic.compute_values.remote(step_ref)
            handles.append(actors.critic)
        if actors.reference is not None:
            inputs["ref_logprobs"] = actors.reference.compute_logprobs.remote(step_ref)
            handles.append(actors.reference)
        actors.faults.wait(list(inputs.values()), handles, "logprobs and values", long=True)
    with timer("update"):
        updating = [h for h in (actors.learner, actors.critic) if h is not None]
        calls = [h.update.remote(step_ref, kl_coef=kl_ctl.value, **inputs) for h in updating]
        updates = actors.faults.get(calls, updating, "update", long=True)  # past its deadline, the run stops
        update_metrics = {k: v for m in updates for k, v in m.items()}  # with the batch's reward/mean, ...
    return samples, sample_metrics, update_metrics


def train_step(
    cfg: Config,
    actors,
    prompts: PromptIterator,
    step: int,
    kl_ctl,
    watch: FailureWatch,
    sample_writer=None,
    producer=None,
) -> dict:
    """One RL step; returns its metrics. With a producer (training.mode one_step_off / async) the
    samples were rolled out while earlier steps trained, and the weight sync is not waited for."""
    timer = PhaseTimer()
    kl_in_reward = driver_needs_old_logprobs(cfg.algorithm, has_reference=actors.reference is not None)
    with timer("step"):
        phases = (cfg, actors, prompts, step, kl_ctl, timer)
        if producer is None and one_call_steps(cfg, actors):  # colocated, a plain step: one actor call
            samples, sample_metrics, update_metrics = rollout_and_update(*phases)
        else:
            samples, sample_metrics, update_metrics = rollout_then_update(*phases, producer)
        with timer("sync"):
            if producer is None:
                sync_weights(actors, version=step + 1)
            else:  # each worker loads it after its calls in flight; later calls run on it
                producer.sync_weights(step + 1)
    if sample_writer is not None:  # a few whole episodes as text: runs/<name>/samples/
        sample_writer.write(step + 1, samples)
    metrics = {
        keys.WEIGHTS_VERSION: step + 1,
        keys.STALENESS: step - min(s.weight_version for s in samples),
        **sample_metrics,
        **update_metrics,  # with the learner's rollout/logprob_diff_max and (a reference's) kl/mean
        **timer.seconds,
        **pipeline_metrics(samples, step, timer.seconds, sample_metrics.get(keys.ROLLOUT_IDLE_S)),
    }
    if kl_in_reward:  # the coefficient moves with the KL the learner measured (kl/mean)
        kl_ctl.update(metrics[keys.KL_MEAN], n_steps=len(samples))
    if actors.reference is not None:
        metrics["kl/coef"] = kl_ctl.value
    watch.check(samples, metrics)  # raises RunFailed after too many steps in a row of nothing but failures
    return metrics


def train(cfg: Config, resume: bool = False, report=None) -> dict:
    run_dir = run_folder(cfg, resume)  # the path; the folder is made once Ray is up and the roles fit
    path = resolve_model_path(cfg)  # `tiny`: a model shipped in the repository; else checked here
    train_rows, eval_rows = task_rows(cfg)
    start_step, state, groups = 0, {"rewards": [], "eval_before": None}, None
    if resume and (found := resume_checkpoint(run_dir / "checkpoints", cfg.checkpoint.fallback)):
        ckpt, groups, state = found  # verified against its manifest before any actor starts
        start_step = state["step"]
        print(f"resumed from {ckpt} at step {start_step}")
    prompts = PromptIterator(train_rows, cfg.run.seed, **state.get("data", {}))
    if "rng" in state:
        restore_rng(state["rng"])
    else:
        random.seed(cfg.run.seed)
    with phase("starting Ray"):
        connect(cfg)  # and check that the cluster can hold every role
    create_run_folder(cfg, run_dir)
    samples = SampleWriter.from_config(cfg, run_dir, path)  # logging.samples_every: episodes as text
    kl_ctl = make_kl_controller(
        cfg.algorithm.kl_controller, cfg.algorithm.kl_coef, cfg.algorithm.kl_target, cfg.algorithm.kl_horizon
    )
    if "kl_ctl" in state:
        kl_ctl.load_state_dict(state["kl_ctl"])
    with (
        StopOnSignal(run_dir) as stop,  # Ctrl-C / SIGTERM: stop after this step; again: abandon it
        actor_loss_stops(run_dir),  # an actor dead for good: ActorLost, with the run folder to resume
        actor_pools(cfg, path, run_dir.name) as actors,
        make_loggers(cfg.logging, run_dir, run_dir.name, cfg.to_dict(), cfg.training.steps) as loggers,
    ):
        if groups is not None:  # the learner's and the critic's: one actor's or a rank group's shards
            load_training_checkpoint(actors, ckpt, groups, state)
        sync_weights(actors, version=start_step)
        if state["eval_before"] is None and not cfg.training.eval_before:
            state["eval_before"] = {}  # training.eval_before=false: the summary's before-values are NaN
        if state["eval_before"] is None:
            with phase(f"held-out evaluation before training ({len(eval_rows)} prompts)"):
                state["eval_before"] = evaluate(cfg, actors, eval_rows)
        watch = FailureWatch(cfg.training.stop_after_failed_steps)
        producer = None  # training.mode sync: every step rolls out its own batch (collect)
        if cfg.training.mode != "sync":  # one_step_off / async: groups rolled out while earlier steps train
            scored = lambda s: finish(cfg, actors, s)  # noqa: E731
            producer = RolloutProducer(cfg, actors, prompts, scored, start_step, state.get("pipeline"))
        for step in range(start_step, cfg.training.steps):
            if stop.requested:  # a signal came before training started
                raise stop.stopped(step)
            metrics = train_step(cfg, actors, prompts, step, kl_ctl, watch, samples, producer)
            metrics.update(actors.faults.take())  # faults/*: restarts, timeouts, retried shards and calls
            state["rewards"].append(metrics[keys.REWARD_MEAN])
            if cfg.training.eval_every and (step + 1) % cfg.training.eval_every == 0:
                metrics.update(evaluate(cfg, actors, eval_rows))
            loggers.log(metrics, step + 1)
            publish_ray_metrics(run_dir.name, metrics)  # run-tagged Ray metrics: the dashboard's Metrics view
            if report is not None:
                report(step + 1, metrics)
            stopping = stop.requested  # read once: the checkpoint and the stop agree
            due = step + 1 == cfg.training.steps or (cfg.checkpoint.every and (step + 1) % cfg.checkpoint.every == 0)
            if due or (stopping and cfg.checkpoint.on_stop):
                if producer is not None:  # first: it finishes the calls in flight, which draw prompts
                    state["pipeline"] = producer.state_dict()
                state.update(step=step + 1, data=prompts.state_dict(), rng=capture_rng(), kl_ctl=kl_ctl.state_dict())
                save_training_checkpoint(actors, run_dir / "checkpoints", step + 1, state, cfg.checkpoint.keep_last_n)
            if stopping:
                raise stop.stopped(step + 1)
        eval_after = evaluate(cfg, actors, eval_rows)
        if cfg.checkpoint.save_hf_model:
            saved = actors.learner.save_hf.remote(str(run_dir / "final_model"), cfg.model.tokenizer_path or path)
            actors.faults.get(saved, actors.learner, "save_hf", long=True)
    return summarize(state["rewards"], state["eval_before"], eval_after, run_dir)


def main(argv: list[str] | None = None) -> int:
    """The command line (relay/run/command_line.py): the exit code, one line per user error."""
    return run_command_line(lambda *a, **k: train(*a, **k), __doc__, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
