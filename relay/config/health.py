"""health.*: the run-health monitor (relay/health/), which reads each step's metrics and raises an
alarm when a run starts hacking its reward or collapsing, and the checks of these keys.

Every threshold is a key here; docs/health.md says what each rule measures and why its default is
where it is. An alarm prints one `relay: health:` line and is logged (health/alarms, health/<rule>);
`stop_on` turns an alarm into a stop after a checkpoint. The defaults keep the shipped default run
silent and fire on the collapse of `training.lr=3e-2` at its second step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Every rule, by the name its alarm, its metric (health/<rule>) and health.stop_on / health.ignore use.
RULES = (
    "reward_hacking",  # the reward climbs while held-out accuracy (or, with a reward model, the rule reward) does not
    "rm_divergence",  # the reward model's score stops tracking the rule reward across the batch
    "kl_acceleration",  # KL to the reference jumps to a multiple of its recent level
    "entropy_collapse",  # the policy's entropy falls to a fraction of its recent level
    "length_blowup",  # most episodes run to the token cap
    "length_collapse",  # responses shrink to a fraction of their recent length
    "repeated_response",  # one response text appears across most prompts
    "tool_rate_collapse",  # a tool task's tool calls per episode fall to a fraction of their recent rate
    "zero_advantage",  # every group's rewards are equal: no learning signal left
    "logprob_gap",  # the engine's and the learner's logprobs of the same tokens drift apart
    "reward_collapse",  # the reward falls to a fraction of its recent level
)


@dataclass(frozen=True)
class HealthConfig:
    enabled: bool = True
    window: int = 5  # the steps before the current one that "recent level" means (trailing mean)
    stop_on: tuple[str, ...] = ()  # rules whose alarm stops the run after a checkpoint; () warns only
    ignore: tuple[str, ...] = ()  # rules not checked
    # A drop must also exceed this many standard errors: of the batch's mean reward (reward_collapse),
    # of a Poisson count of tool calls (tool_rate_collapse). Keeps small batches from crying wolf.
    noise_sigmas: float = 3.0
    reward_collapse: float = 0.5  # the mean reward fell by at least this fraction of its recent level
    # reward_hacking: the reward rose by at least hacking_reward_rise (reward units) while held-out
    # accuracy (between two held-out evaluations) or the rule reward (over two windows) changed by at most hacking_flat
    hacking_reward_rise: float = 0.1
    hacking_flat: float = 0.0
    # ... or rose by hacking_reward_rise since the best held-out evaluation while held-out accuracy
    # fell below it by more than this (above the noise of a held-out score near its plateau)
    hacking_fall: float = 0.02
    rm_min_correlation: float = 0.1  # correlation of RM score and rule reward over the batch, averaged over the window
    kl_growth: float = 3.0  # kl/mean reached this multiple of its recent level ...
    kl_min: float = 0.05  # ... and at least this (nats per token): tiny KLs early on jump by large factors
    entropy_collapse: float = 0.3  # actor/entropy fell below this fraction of its recent level
    length_cap_frac: float = 0.9  # at least this share of the episodes was cut by the token cap
    length_collapse: float = 0.3  # the mean response length fell below this fraction of its recent level
    repeat_share: float = 0.5  # the most common response text appears in at least this share of the groups ...
    repeat_min_groups: int = 3  # ... and in at least this many of them
    tool_rate_collapse: float = 0.25  # tool calls per episode fell below this fraction of their recent rate
    zero_adv_frac: float = 1.0  # at least this share of the groups has all-equal rewards ...
    zero_adv_steps: int = 3  # ... for this many steps in a row (a solved batch for one step is no alarm) ...
    zero_adv_min_groups: int = 16  # ... and for as many more as it takes to see this many groups
    logprob_gap: float = 0.05  # mean |engine - learner| logprob per response token, nats
    # In-run held-out evaluations (training.eval_every) on this many held-out rows, drawn once with
    # run.seed so every evaluation reads the same ones; 0: all of them. Before and after training: all.
    eval_rows: int = 0


def validate_health(h: HealthConfig) -> list[str]:
    """One line per bad health.* value, naming its key."""
    p = []
    for key in ("stop_on", "ignore"):
        for name in getattr(h, key):
            if name not in RULES:
                p.append(f"health.{key}: unknown rule {name!r}; the rules are {', '.join(RULES)}")
    if h.window < 1:
        p.append(f"health.window: must be >= 1, got {h.window}")
    if h.eval_rows < 0:
        p.append(f"health.eval_rows: must be >= 0 (0: every held-out row), got {h.eval_rows}")
    if h.repeat_min_groups < 1:
        p.append(f"health.repeat_min_groups: must be >= 1, got {h.repeat_min_groups}")
    if h.zero_adv_steps < 1:
        p.append(f"health.zero_adv_steps: must be >= 1, got {h.zero_adv_steps}")
    if h.zero_adv_min_groups < 1:
        p.append(f"health.zero_adv_min_groups: must be >= 1, got {h.zero_adv_min_groups}")
    fractions = ("reward_collapse", "entropy_collapse", "length_cap_frac", "length_collapse", "repeat_share")
    for key in (*fractions, "tool_rate_collapse", "zero_adv_frac"):
        value = getattr(h, key)
        if not 0 < value <= 1:
            p.append(f"health.{key}: must be in (0, 1], got {value}")
    for key in ("noise_sigmas", "kl_min", "hacking_fall"):
        value = getattr(h, key)
        if not (math.isfinite(value) and value >= 0):
            p.append(f"health.{key}: must be >= 0, got {value}")
    for key in ("hacking_reward_rise", "logprob_gap"):
        value = getattr(h, key)
        if not (math.isfinite(value) and value > 0):
            p.append(f"health.{key}: must be > 0, got {value}")
    if not (math.isfinite(h.kl_growth) and h.kl_growth > 1):
        p.append(f"health.kl_growth: must be > 1, got {h.kl_growth}")
    if not math.isfinite(h.hacking_flat):
        p.append(f"health.hacking_flat: must be a finite number, got {h.hacking_flat}")
    if not -1 <= h.rm_min_correlation < 1:
        p.append(f"health.rm_min_correlation: must be in [-1, 1), got {h.rm_min_correlation}")
    return p
