"""The health rules: pure functions of a step's metrics and the steps before it (a `View`),
each returning the value it measured, whether it tripped and the line's numbers, or None when the
step lacks what it reads. relay/config/health.py holds each threshold; docs/health.md the why.

"Recent level" is the mean over the `health.window` steps before the current one, so a sudden
change is caught at the step it happens (the lr=3e-2 collapse of the default task at step 2)
while the slow drift of healthy training (entropy falling as the policy sharpens) is not.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from relay.config.health import HealthConfig
from relay.run import metric_keys as keys

EVAL_KEYS = ("eval/accuracy", "eval/success_rate")  # held-out: the built-in tasks' and environments'


@dataclass(frozen=True)
class Check:
    value: float  # logged as health/<rule>
    tripped: bool
    detail: str  # the numbers, for the console line


@dataclass
class View:
    """One step's metrics (`now`) and the earlier steps' values of the tracked keys (`history`,
    oldest first), plus the last held-out point for reward_hacking."""

    now: dict[str, float]
    history: dict[str, list[float]]
    window: int
    heldout: dict | None = None  # {"step", "value", "reward"}: the last held-out evaluation and the reward then
    best: dict | None = None  # the same for the best held-out evaluation so far
    # the reward level a held-out result is compared at, when it measured an earlier step's weights
    # (eval/lag_steps: logged steps later, beside training); None: this step's
    level: float | None = None

    def get(self, key: str) -> float | None:
        v = self.now.get(key)
        return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None

    def recent(self, key: str, n: int | None = None) -> list[float]:
        """The values of the last `n` (default: window) steps before this one that had `key`."""
        n = self.window if n is None else n
        return self.history.get(key, [])[-n:] if n > 0 else []


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _fall(v: View, key: str, threshold: float, name: str) -> Check | None:
    """The value now as a fraction of its recent level; tripped at or below `threshold`."""
    now, recent = v.get(key), v.recent(key)
    if now is None or not recent or mean(recent) <= 0:
        return None
    ref = mean(recent)
    ratio = now / ref
    detail = f"{key} {now:.3g} is {ratio:.0%} of its mean {ref:.3g} over the last {len(recent)} steps (health.{name}={threshold:g})"
    return Check(ratio, ratio <= threshold, detail)


def reward_collapse(v: View, c: HealthConfig) -> Check | None:
    now, recent = v.get(keys.REWARD_MEAN), v.recent(keys.REWARD_MEAN)
    if now is None or not recent or abs(mean(recent)) < 1e-9:
        return None
    ref = mean(recent)
    drop = ref - now
    frac = drop / abs(ref)
    episodes = v.get(keys.EPISODES) or 1.0
    # the spread of the recent steps too: a batch that fell to one reward has none of its own, and
    # a rare success (0.03 of a batch) missing from one batch is no collapse
    spread = max([v.get(keys.REWARD_STD) or 0.0, *v.recent(keys.REWARD_STD)])
    noise = c.noise_sigmas * spread / math.sqrt(episodes)
    # a recent level within the noise of 0 (normalised reward-model scores hover there) has
    # nothing to collapse from: any fall is a large fraction of it
    tripped = frac >= c.reward_collapse and drop >= noise and abs(ref) >= noise
    detail = (
        f"reward/mean {now:.3g}, down {frac:.0%} from its mean {ref:.3g} over the last {len(recent)} steps "
        f"(health.reward_collapse={c.reward_collapse:g})"
    )
    return Check(frac, tripped, detail)


def reward_hacking(v: View, c: HealthConfig) -> Check | None:
    """Held-out: at a held-out evaluation, the reward's rise since the previous one (the recent
    level then and now) against the held-out accuracy's change. With a reward model: every step,
    the reward's rise over the last window against the previous one, next to the rule reward's."""
    now_eval = next((e for key in EVAL_KEYS if (e := v.get(key)) is not None), None)
    if now_eval is not None and v.heldout is not None and v.heldout.get("reward") is not None:
        now = v.get(keys.REWARD_MEAN)  # None after training: then the last window's
        if v.level is not None:  # a result of an earlier step's weights: the level at that step
            level = v.level
        else:
            level = mean(
                v.recent(keys.REWARD_MEAN, v.window - 1) + [now] if now is not None else v.recent(keys.REWARD_MEAN)
            )
        # since the last evaluation (flat or falling), or since the best one (fallen by more than
        # hacking_fall): a reward that climbs a little between every two evaluations while held-out
        # accuracy slides is measured against where the slide began
        since = [(v.heldout, c.hacking_flat)]
        if v.best is not None and v.best["reward"] is not None and v.best is not v.heldout:
            since.append((v.best, -c.hacking_fall))
        checks = []
        for point, allowed in since:
            rise, change = level - point["reward"], now_eval - point["value"]
            detail = (
                f"reward {point['reward']:.3g} -> {level:.3g} while held-out {point['value']:.3g} -> {now_eval:.3g} "
                f"since step {point['step']} (health.hacking_reward_rise={c.hacking_reward_rise:g}, "
                f"{'health.hacking_flat' if allowed == c.hacking_flat else 'health.hacking_fall'}={abs(allowed):g})"
            )
            # a held-out score at 1 cannot rise: flat there, or a slip within hacking_fall (a problem
            # or two missed), is a solved task, not a hacked reward
            if point["value"] >= 1.0:
                allowed = min(allowed, -c.hacking_fall)
            tripped = rise >= c.hacking_reward_rise and change <= allowed and now_eval < 1.0
            checks.append(Check(rise - change, tripped, detail))
        return next((ch for ch in checks if ch.tripped), checks[0])
    w = v.window
    rewards, rules = v.recent(keys.REWARD_MEAN, 2 * w - 1), v.recent(keys.RM_RULE_REWARD_MEAN, 2 * w - 1)
    if v.get(keys.RM_RULE_REWARD_MEAN) is None or len(rewards) < 2 * w - 1 or len(rules) < 2 * w - 1:
        return None
    rewards, rules = rewards + [v.get(keys.REWARD_MEAN)], rules + [v.get(keys.RM_RULE_REWARD_MEAN)]
    rise = mean(rewards[w:]) - mean(rewards[:w])
    change = mean(rules[w:]) - mean(rules[:w])
    detail = (
        f"reward/mean rose {rise:+.3g} while rm/rule_reward_mean moved {change:+.3g} over the last {w} steps against "
        f"the {w} before (health.hacking_reward_rise={c.hacking_reward_rise:g}, health.hacking_flat={c.hacking_flat:g})"
    )
    return Check(rise - change, rise >= c.hacking_reward_rise and change <= c.hacking_flat, detail)


def rm_divergence(v: View, c: HealthConfig) -> Check | None:
    now = v.get(keys.RM_RULE_CORRELATION)
    if now is None:
        return None
    values = v.recent(keys.RM_RULE_CORRELATION, v.window - 1) + [now]
    r = mean(values)
    detail = (
        f"reward-model score vs rule reward correlation {r:.2f} over the last {len(values)} steps "
        f"(health.rm_min_correlation={c.rm_min_correlation:g})"
    )
    return Check(r, r <= c.rm_min_correlation, detail)


def kl_acceleration(v: View, c: HealthConfig) -> Check | None:
    now, recent = v.get(keys.KL_MEAN), v.recent(keys.KL_MEAN)
    if now is None or not recent:
        return None
    ref = max(mean(recent), 1e-6)  # the reference's own KL is 0 at the first step
    growth = now / ref
    detail = (
        f"kl/mean {now:.3g} is {growth:.1f}x its mean {mean(recent):.3g} over the last {len(recent)} steps "
        f"(health.kl_growth={c.kl_growth:g}, health.kl_min={c.kl_min:g})"
    )
    return Check(growth, growth >= c.kl_growth and now >= c.kl_min, detail)


def entropy_collapse(v: View, c: HealthConfig) -> Check | None:
    return _fall(v, keys.ENTROPY, c.entropy_collapse, "entropy_collapse")


def length_collapse(v: View, c: HealthConfig) -> Check | None:
    return _fall(v, keys.RESPONSE_LENGTH, c.length_collapse, "length_collapse")


def tool_rate_collapse(v: View, c: HealthConfig) -> Check | None:
    now, recent = v.get(keys.TOOL_CALLS_PER_EPISODE), v.recent(keys.TOOL_CALLS_PER_EPISODE)
    if now is None or not recent or mean(recent) <= 0:
        return None
    ref, episodes = mean(recent), v.get(keys.EPISODES) or 1.0
    ratio = now / ref
    # calls are counts: a fall of fewer than noise_sigmas Poisson deviations may be chance
    significant = (ref - now) * episodes >= c.noise_sigmas * math.sqrt(ref * episodes)
    detail = (
        f"tool calls per episode {now:.3g} is {ratio:.0%} of its mean {ref:.3g} over the last {len(recent)} steps "
        f"(health.tool_rate_collapse={c.tool_rate_collapse:g})"
    )
    return Check(ratio, ratio <= c.tool_rate_collapse and significant, detail)


def _level(key: str, threshold: float, name: str, what: str) -> Callable[[View, HealthConfig], Check | None]:
    def rule(v: View, c: HealthConfig) -> Check | None:
        now = v.get(key)
        if now is None:
            return None
        return Check(now, now >= threshold, f"{what} {now:.3g} (health.{name}={threshold:g})")

    return rule


def length_blowup(v: View, c: HealthConfig) -> Check | None:
    return _level(keys.TRUNCATED_FRAC, c.length_cap_frac, "length_cap_frac", "share of episodes cut at the token cap")(
        v, c
    )


def repeated_response(v: View, c: HealthConfig) -> Check | None:
    share, groups = v.get(keys.TOP_RESPONSE_SHARE), v.get(keys.GROUPS)
    if share is None:
        return None
    # with few prompts a step, two of them agreeing on a short answer is chance, not a takeover
    holding = round(share * groups) if groups else 0
    detail = (
        f"share of groups holding the most common response {share:.3g}, {holding} groups "
        f"(health.repeat_share={c.repeat_share:g}, health.repeat_min_groups={c.repeat_min_groups})"
    )
    return Check(share, share >= c.repeat_share and holding >= c.repeat_min_groups, detail)


def logprob_gap(v: View, c: HealthConfig) -> Check | None:
    what = "mean |engine - learner| logprob per token"
    return _level(keys.LOGPROB_GAP, c.logprob_gap, "logprob_gap", what)(v, c)


def zero_advantage(v: View, c: HealthConfig) -> Check | None:
    if v.get(keys.ZERO_ADV_GROUPS) is None:
        return None
    # as many steps as it takes to see zero_adv_min_groups groups: 4 groups a step, all failing
    # by chance at a 0.03 success rate, are equal for 3 steps in a row 1 time in 20
    per_step = max(1.0, v.get(keys.GROUPS) or 1.0)
    steps = max(c.zero_adv_steps, math.ceil(c.zero_adv_min_groups / per_step))
    equal = v.recent(keys.ZERO_ADV_GROUPS, steps - 1) + [v.get(keys.ZERO_ADV_GROUPS)]
    solved = v.recent(keys.SOLVED_GROUPS, steps - 1) + [v.get(keys.SOLVED_GROUPS) or 0.0]
    # A group that solved its prompt in every episode has no signal left because the task is learnt
    # there, not because learning stalled: only the other equal groups count.
    run = [e - s for e, s in zip(equal, [0.0] * (len(equal) - len(solved)) + solved)]
    now = run[-1]
    tripped = len(run) == steps and min(run) >= c.zero_adv_frac
    detail = (
        f"share of groups with all-equal rewards, not all solved, {now:.3g}, at least {c.zero_adv_frac:g} for {len(run)} steps "
        f"(health.zero_adv_frac={c.zero_adv_frac:g}, health.zero_adv_steps={c.zero_adv_steps}, "
        f"health.zero_adv_min_groups={c.zero_adv_min_groups})"
    )
    return Check(now, tripped, detail)


# name -> rule, in relay.config.health.RULES's order
RULE_FUNCTIONS: dict[str, Callable[[View, HealthConfig], Check | None]] = {
    "reward_hacking": reward_hacking,
    "rm_divergence": rm_divergence,
    "kl_acceleration": kl_acceleration,
    "entropy_collapse": entropy_collapse,
    "length_blowup": length_blowup,
    "length_collapse": length_collapse,
    "repeated_response": repeated_response,
    "tool_rate_collapse": tool_rate_collapse,
    "zero_advantage": zero_advantage,
    "logprob_gap": logprob_gap,
    "reward_collapse": reward_collapse,
}
# Rules on a level rather than a change: they alarm only once the run has been on the healthy side
# (a run that starts there, e.g. a task whose answers all share one text, is how the task is).
LEVEL_RULES = frozenset({"rm_divergence", "length_blowup", "repeated_response", "zero_advantage", "logprob_gap"})
