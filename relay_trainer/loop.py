"""relay's RL loop, top to bottom: `train(cfg)` runs one run; `python driver.py`, `relay train`,
RayPPOTrainer.fit and each Ray Tune trial all call it.

samples (rolled out and scored) -> what the advantages need (reference logprobs, values, old
logprobs) -> update (the learner builds the Batch and the advantages) -> weight sync -> log ->
checkpoint. Every arrow is an object ref moving between Ray actors; the driver's process holds
plain Python and never loads torch. How each phase runs (separate actors, one colocated call, or
samples from the producer) is decided once at start-up: relay_trainer/steps.py. Old logprobs are
the learner's own, from the update's forward pass, a no-grad pass before it, or a call of their own
before the update, as relay/config/resolved.py old_logprobs_source chooses.
"""

from __future__ import annotations

import random
import time

from relay.checkpoint.rng import capture_rng, restore_rng
from relay.config import Config
from relay.config.resolved import kl_in_reward
from relay.config.role_settings import HeldOutSettings
from relay.envs.data import PromptIterator
from relay.envs.reasoning_gym import majority_metrics
from relay.failures import FailureWatch
from relay.health import HealthMonitor, batch_signals, held_out_sample
from relay.run import metric_keys as keys
from relay.run.folder import create_run_folder, run_folder
from relay.run.loggers import make_loggers
from relay.run.model_source import resolve_model_path
from relay.run.pipeline import pipeline_metrics
from relay.run.progress import phase
from relay.run.resume import resume_checkpoint
from relay.run.rows import task_rows
from relay.run.samples import SampleWriter
from relay.run.step_metrics import PhaseTimer
from relay.run.stop import HealthStopped, StopOnSignal
from relay.run.summary import summarize
from relay.update.kl_control import make_kl_controller
from relay_trainer.actor_loss import actor_loss_stops
from relay_trainer.checkpoints import load_training_checkpoint, save_final_model, save_training_checkpoint
from relay_trainer.elastic import rollout_pool
from relay_trainer.evaluation import overlapped_evaluation
from relay_trainer.learner_recovery import LearnerRecovery
from relay_trainer.metrics import publish as publish_ray_metrics
from relay_trainer.pools import actor_pools, connect
from relay_trainer.sft import demonstrations, supervised_stage
from relay_trainer.steps import OneCall, StepPlan, evaluate, step_plan
from relay_trainer.weights import sync_weights


def train_step(
    cfg: Config, actors, plan: StepPlan | OneCall, step: int, kl_ctl, watch: FailureWatch, sample_writer=None
) -> dict:
    """One RL step, its phases in order; returns its metrics. `plan` (relay_trainer/steps.py) runs each
    phase for this run's layout and training.mode, and times it."""
    timer = PhaseTimer()
    with timer("step"):
        if isinstance(plan, OneCall):  # colocated, nothing between: one actor call rolls out, scores and updates
            samples, sample_metrics, update_metrics = plan.rollout_and_update(step, timer)
        else:
            samples, sample_metrics = plan.take_samples(step, timer)  # rolled out and scored
            inputs = plan.advantage_inputs(samples, timer)  # reference logprobs, values, old logprobs
            update_metrics = plan.update(inputs, timer)  # the learner builds the Batch and its advantages
        with timer("sync"):  # colocated: the update already tagged the shared module, no copy
            plan.sync_weights(step + 1)
    if sample_writer is not None:  # a few whole episodes as text: runs/<name>/samples/
        sample_writer.write(step + 1, samples)
    metrics = {
        keys.WEIGHTS_VERSION: step + 1,
        keys.STALENESS: step - min(s.weight_version for s in samples),
        **sample_metrics,
        **batch_signals(samples, cfg.tools.enabled, cfg.task.success_threshold),  # what the health rules read
        **update_metrics,  # with the learner's rollout/logprob_diff_max and (a reference's) kl/mean
        **timer.seconds,
        **timer.timeline(),  # where the step and its phases began: python -m relay.run.plot --timeline
        **pipeline_metrics(samples, step, timer.seconds, sample_metrics.get(keys.ROLLOUT_IDLE_S)),
    }
    if kl_in_reward(cfg):  # the coefficient moves with the KL the learner measured (kl/mean)
        kl_ctl.update(metrics[keys.KL_MEAN], n_steps=len(samples))
    if actors.reference is not None:
        metrics["kl/coef"] = kl_ctl.value
    watch.check(samples, metrics)  # raises RunFailed after too many steps in a row of nothing but failures
    return metrics


def train(cfg: Config, resume: bool = False, report=None) -> dict:
    started = time.perf_counter()  # the summary's seconds_* say when each held-out result was in
    run_dir = run_folder(cfg.run, resume)  # the path; the folder is made once Ray is up and the roles fit
    # `tiny`: a model shipped in the repository; else checked here, with the critic's and reward model's
    path = resolve_model_path(cfg.model, cfg.task, cfg.tools, cfg.critic, cfg.reward_model)
    train_rows, eval_rows = task_rows(cfg.task, cfg.tools, cfg.run.seed)
    # read now, before any actor starts: a bad demonstration stops nothing started
    demos = demonstrations(cfg.sft, cfg.task, cfg.tools, train_rows) if cfg.sft.steps else []
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
        rollout_pool(cfg, actors, run_dir.name) as elastic,  # resources.rollout.count {min, max}: grows and shrinks
        make_loggers(cfg.logging, run_dir, run_dir.name, cfg.to_dict(), cfg.training.steps) as loggers,
    ):
        # a learner lost in the run is restored from its last checkpoint, its later updates replayed
        actors.recovery = recovery = LearnerRecovery(
            actors, cfg.resources.learner_restores, tag=run_dir.name, resources=cfg.resources.learner
        )
        if groups is not None:  # the learner's and the critic's: one actor's or a rank group's shards
            load_training_checkpoint(actors, ckpt, groups, state)
            recovery.checkpointed(ckpt)
        sync_weights(actors, version=start_step)
        held_out = HeldOutSettings.of(cfg)  # what scoring the held-out episodes reads
        if state["eval_before"] is None and not cfg.training.eval_before:
            state["eval_before"] = {}  # training.eval_before=false: the summary's before-values are NaN
        if state["eval_before"] is None:
            with phase(f"held-out evaluation before training ({len(eval_rows)} prompts)"):
                state["eval_before"] = evaluate(actors, held_out, eval_rows)
            state.setdefault("seconds", {})["before"] = time.perf_counter() - started
        if demos and "eval_after_sft" not in state:  # SFT then RL, each measured on the held-out rows
            with phase(f"supervised stage ({cfg.sft.steps} steps)"):
                supervised_stage(cfg.sft, actors, demos, run_dir, cfg.run.seed, cfg.logging.console_every)
            recovery.state_unknown()  # trained outside the kept updates: restorable from the next checkpoint
            with phase("held-out evaluation after the supervised stage"):
                state["eval_after_sft"] = evaluate(actors, held_out, eval_rows)
            state.setdefault("seconds", {})["after_sft"] = time.perf_counter() - started
        watch = FailureWatch(cfg.training.stop_after_failed_steps)
        health = HealthMonitor(cfg.health, state["eval_before"], state.get("health"))  # docs/health.md
        in_run_rows = held_out_sample(eval_rows, cfg.health.eval_rows, cfg.run.seed)  # training.eval_every's
        # one_step_off / async: beside training
        evals = overlapped_evaluation(cfg.training, held_out, actors, in_run_rows)
        plan = step_plan(cfg, actors, prompts, kl_ctl, start_step, state.get("pipeline"))
        elastic.producer = getattr(plan, "producer", None)  # drained before a worker leaves the pool
        for step in range(start_step, cfg.training.steps):
            if stop.requested:  # a signal came before training started
                raise stop.stopped(step)
            metrics = train_step(cfg, actors, plan, step, kl_ctl, watch, samples)
            metrics.update(actors.faults.take())  # faults/*: restarts, timeouts, retried shards and calls
            metrics.update(elastic.resize(metrics))  # an elastic pool: rollout/workers, its request to the autoscaler
            state["rewards"].append(metrics[keys.REWARD_MEAN])
            due = step + 1 == cfg.training.steps or (cfg.checkpoint.every and (step + 1) % cfg.checkpoint.every == 0)
            if evals is not None:  # started now, logged with a later step once back (eval/lag_steps)
                metrics.update(evals.after_step(step + 1, checkpoint=bool(due)))
            elif cfg.training.eval_every and (step + 1) % cfg.training.eval_every == 0:
                metrics.update(evaluate(actors, held_out, in_run_rows))
            out = evals is not None and evals.measuring == step + 1  # its result is compared at this step's reward
            metrics.update(
                health.observe(step + 1, metrics, evaluating=out)
            )  # health/*; a `relay: health:` line per alarm
            loggers.log(metrics, step + 1)
            publish_ray_metrics(run_dir.name, metrics)  # run-tagged Ray metrics: the dashboard's Metrics view
            if report is not None:
                report(step + 1, metrics)
            stopping = stop.requested  # read once: the checkpoint and the stop agree
            halted = health.halt  # a health.stop_on rule fired: checkpoint, then stop
            if evals is not None and (halted or stopping) and (late := evals.collect(step + 1, wait=True)):
                # no step foresees a stop: the evaluation out is waited for before the checkpoint,
                # and the step's metrics logged again with it (the later record of a step is read)
                metrics.update(late)
                loggers.log(metrics, step + 1)
            if due or halted or (stopping and cfg.checkpoint.on_stop):
                # first: it may draw prompts; it waits on the last weight sync, where a learner may be lost
                if (pipeline := plan.state_dict()) is not None:
                    state["pipeline"] = pipeline
                state.update(step=step + 1, data=prompts.state_dict(), rng=capture_rng(), kl_ctl=kl_ctl.state_dict())
                state["health"] = health.state_dict()
                root, keep = run_dir / "checkpoints", cfg.checkpoint.keep_last_n
                recovery.checkpointed(save_training_checkpoint(actors, root, step + 1, state, keep))
            if stopping:
                raise stop.stopped(step + 1)
            if halted:
                raise HealthStopped(halted, step + 1, run_dir)
        if cfg.training.steps:
            eval_after = evaluate(actors, held_out, eval_rows)
        else:  # the supervised stage alone: its held-out result is the run's
            eval_after = state["eval_after_sft"]
        state.setdefault("seconds", {})["after"] = time.perf_counter() - started
        health.final(eval_after, cfg.training.steps)  # reward_hacking against the held-out result
        if cfg.checkpoint.save_hf_model:
            save_final_model(actors, str(run_dir / "final_model"), cfg.model.tokenizer_path or path)
    return summarize(
        state["rewards"],
        state["eval_before"],
        eval_after,
        run_dir,
        state.get("eval_after_sft"),
        state.get("seconds"),
        health.alarms,
        majority_metrics(train_rows, eval_rows),  # reasoning-gym: what one repeated answer would score
    )
