"""Names of the step-metrics keys that more than one place relies on: the code that writes each
key and the Ray metrics publisher (relay_trainer/metrics.py) that reads it both use these constants,
so a rename reaches both sides. tests/actors/test_metrics.py runs two real training steps and
checks that every Ray metric the publisher defines got a value from them.
"""

from __future__ import annotations


def phase_seconds(phase: str) -> str:
    """The key of a phase's wall time in one step (relay.run.step_metrics.PhaseTimer writes it)."""
    return f"time/{phase}_s"


def phase_start(phase: str) -> str:
    """Where a phase began: seconds after its step began (PhaseTimer writes it; relay.run.timeline draws it)."""
    return f"timeline/{phase}_start_s"


def rollout_span(worker: int, n: int, edge: str) -> str:
    """Rollout worker `worker`'s n-th busy span among the rollout work a step received; `edge` is
    "start" or "end", in unix seconds (the worker's clock: the driver's perf_counter is not shared
    across processes and hosts, the wall clock is, within clock sync)."""
    return f"timeline/rollout/{worker}/{n}/{edge}_at"


REWARD_MEAN = "reward/mean"
REWARD_STD = "reward/std"  # standard deviation of the step's batch rewards
KL_MEAN = "kl/mean"
POLICY_LOSS = "actor/pg_loss"  # the Learner's "pg_loss" under its "actor/" prefix
TOKENS_PER_S = "rollout/tokens_per_s"  # the whole batch; f"{TOKENS_PER_S}/{i}": rollout worker i
WEIGHTS_VERSION = "weights/version"  # the policy version after the step's update
STALENESS = "weights/staleness"  # the version the update ran on minus the batch's oldest weight version
# an in-run evaluation beside training (training.mode one_step_off / async): the oldest weight version its
# samples carry, and how many steps after the one whose weights it measured it was logged
EVAL_WEIGHTS_VERSION = "eval/weights_version"
EVAL_LAG_STEPS = "eval/lag_steps"
TOOL_CALLS = "tools/calls"  # tool calls the model made this step (malformed ones included)
TOOL_ERRORS = "tools/errors"  # tool calls of this step that failed (errors, timeouts, malformed calls)
TOOL_COUNTS = (TOOL_CALLS, TOOL_ERRORS)  # totals: summed over rollout workers and dynamic-sampling tries
# reward_model.* (relay_trainer/reward_model_pool.py): raw scores' mean, the rule's mean on the same samples
# (a score that climbs while it stays flat is reward hacking), unscored samples, scoring time
RM_SCORE_MEAN = "rm/score_mean"
RM_RULE_REWARD_MEAN = "rm/rule_reward_mean"
RM_ERRORS = "rm/errors"
RM_SECONDS = "rm/seconds"
STEP_S = phase_seconds("step")
ROLLOUT_S = phase_seconds("rollout")
REWARD_S = phase_seconds("reward")  # scoring, done by the rollout workers inside the rollout phase: the slowest's
UPDATE_S = phase_seconds("update")
SYNC_S = phase_seconds("sync")
LEARNER_UPDATE_S = "time/learner_update_s"  # the Learner's own update time; UPDATE_S is the phase's
# training.mode one_step_off / async (relay/run/pipeline.py, relay_trainer/producer.py)
STALENESS_MIN = "weights/staleness_min"  # versions behind the update's, over every trained sample of the step
STALENESS_MEAN = "weights/staleness_mean"
STALENESS_MAX = "weights/staleness_max"
MIXED_SAMPLES = "weights/mixed_samples"  # rollout.partial: trained samples whose tokens came from several versions
QUEUE_DEPTH = "rollout/queue_depth"  # finished groups left in the buffer after the step took its batch
IN_FLIGHT = "rollout/in_flight"  # groups being rolled out when the step took its batch
# an elastic pool (resources.rollout.count: {min, max}; relay/run/elastic.py): workers rolling out, and
# how many it asks the autoscaler room for
ROLLOUT_WORKERS = "rollout/workers"
ROLLOUT_WORKERS_WANTED = "rollout/workers_wanted"
DROPPED_STALE = "rollout/dropped_stale"  # groups dropped (or drawn again) this step: older than max_staleness
ROLLOUT_IDLE_S = "time/rollout_idle_s"  # per worker: seconds between its calls (waiting for weights or work)
LEARNER_WAIT_S = "time/learner_wait_s"  # seconds the step waited for its samples (the learner had nothing to do)
IDLE_ROLLOUT = "idle/rollout"  # ROLLOUT_IDLE_S / step wall time
IDLE_LEARNER = "idle/learner"  # LEARNER_WAIT_S / step wall time
# timelines (python -m relay.run.plot --timeline): the step's start in unix seconds; each phase's
# start after it (phase_start) and each rollout worker's busy spans (rollout_span) place the bars
STEP_START_AT = "timeline/step_start_at"
# The health monitor's inputs (relay/health/): the learner's and the batch's, and what
# relay/health/signals.py reads off the step's samples in the driver
ENTROPY = "actor/entropy"
RESPONSE_LENGTH = "response/length_mean"
LOGPROB_GAP = "rollout/logprob_diff_mean"  # mean |engine - learner| logprob per response token
EPISODES = "rollout/episodes"  # episodes the step trained on
TRUNCATED_FRAC = "response/truncated_frac"  # episodes a token cap cut (finish length or budget)
GROUPS = "rollout/groups"  # prompts (groups of samples) in the step
TOP_RESPONSE_SHARE = "response/top_share"  # share of groups holding the batch's most common response text
ZERO_ADV_GROUPS = "groups/zero_adv_frac"  # groups whose rewards are all equal (no group-relative signal)
SOLVED_GROUPS = "groups/solved_frac"  # groups whose every episode succeeded (task.success_threshold)
TOOL_CALLS_PER_EPISODE = "tools/calls_per_episode"  # tool tasks (tools.enabled) only
RM_RULE_CORRELATION = "rm/rule_correlation"  # across the batch: reward-model score vs rule reward
HEALTH_ALARMS = "health/alarms"  # rules tripped at the step


def health_value(rule: str) -> str:
    """The value a health rule measured at the step (relay/config/health.py RULES)."""
    return f"health/{rule}"


def health_fired(rule: str) -> str:
    """1.0 at the step a health rule's alarm began (absent elsewhere): the plot's markers."""
    return f"health/fired/{rule}"
