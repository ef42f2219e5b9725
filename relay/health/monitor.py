"""HealthMonitor: the driver's one object that watches a run's health. `observe(step, metrics)`
once per step, after the step's metrics are complete (held-out evaluation included), returns the
health/* metrics to log with them and prints one `relay: health:` line per alarm as it begins;
`final(eval_after, step)` checks the held-out evaluation after training the same way.

A held-out result logged steps after the one whose weights it measured (eval/lag_steps: an
evaluation beside training in one_step_off / async) is compared at that step's reward level,
which `observe(..., evaluating=True)` kept when the evaluation started.

An alarm is a rule's condition holding at a step; it is announced (printed, health/fired/<rule>)
at the step it begins, and counted in health/alarms at every step it holds. A rule in
health.stop_on sets `halt`, which the loop turns into a checkpoint and a HealthStopped.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from relay.config.health import RULES, HealthConfig
from relay.health.rules import EVAL_KEYS, LEVEL_RULES, RULE_FUNCTIONS, Check, View, mean
from relay.run import metric_keys as keys

# the metrics the rules read across steps; the monitor keeps their last 2 x window values (or
# zero_adv_steps or zero_adv_min_groups, if more: one group a step needs that many steps)
TRACKED = (
    keys.REWARD_MEAN,
    keys.REWARD_STD,
    keys.EPISODES,
    keys.GROUPS,
    keys.ENTROPY,
    keys.RESPONSE_LENGTH,
    keys.KL_MEAN,
    keys.LOGPROB_GAP,
    keys.TRUNCATED_FRAC,
    keys.TOP_RESPONSE_SHARE,
    keys.ZERO_ADV_GROUPS,
    keys.SOLVED_GROUPS,
    keys.TOOL_CALLS_PER_EPISODE,
    keys.RM_RULE_CORRELATION,
    keys.RM_RULE_REWARD_MEAN,
)


def held_out_sample(rows: list, k: int, seed: int) -> list:
    """The held-out rows in-run evaluations read (health.eval_rows): `k` of them drawn once with
    `seed`, in their order, so successive evaluations compare the same problems; all when k is 0."""
    if not k or k >= len(rows):
        return rows
    return [rows[i] for i in sorted(random.Random(seed).sample(range(len(rows)), k))]


class HealthMonitor:
    def __init__(
        self,
        cfg: HealthConfig,
        eval_before: dict | None = None,
        state: dict | None = None,
        say: Callable[[str], None] = lambda line: print(line, flush=True),
    ):
        self.cfg, self.say = cfg, say
        self.rules = [r for r in RULES if r not in cfg.ignore] if cfg.enabled else []
        self.history: dict[str, list[float]] = {}
        self.active: set[str] = set()  # rules whose condition held at the last step
        self.armed: set[str] = set()  # level rules seen on the healthy side
        before = next((eval_before[k] for k in EVAL_KEYS if eval_before and k in eval_before), None)
        # the held-out point before training; its reward level is the first step's (the same policy)
        self.before = {"step": 0, "value": before, "reward": None} if before == before and before is not None else None
        # the last held-out point: in-run evaluations on a sample (health.eval_rows) compare with
        # each other only, the evaluation after training (every row) with the one before
        self.heldout = None if cfg.eval_rows else self.before
        self.best = self.heldout  # the best held-out point so far, with the reward level then
        self.alarms: list[dict] = []  # every alarm announced: step, rule, value, line
        self.levels: dict[int, float] = {}  # reward level of each step whose evaluation is out
        self.halt: str | None = None  # a health.stop_on rule fired at the last step
        if state:
            self.load_state_dict(state)

    def observe(self, step: int, metrics: dict[str, float], evaluating: bool = False) -> dict[str, float]:
        """The health/* metrics of `step` (1-based); prints the alarms that begin at it. `evaluating`:
        a held-out evaluation of this step's weights is out, its result to come with a later step."""
        if not self.rules:
            return {}
        self.halt = None
        lag, level = metrics.get(keys.EVAL_LAG_STEPS), None
        measured = step if lag is None else step - int(lag)  # the step whose weights a held-out result measured
        if lag is not None:  # results come back in order: the older steps' levels are not needed again
            level = self.levels.pop(measured, None)
            self.levels = {k: v for k, v in self.levels.items() if k > measured}
        view = View(metrics, self.history, self.cfg.window, self.heldout, self.best, level)
        out, active = {}, set()
        for rule in self.rules:
            check = RULE_FUNCTIONS[rule](view, self.cfg)
            if check is None:
                continue
            if check.value == check.value and abs(check.value) != float("inf"):
                out[keys.health_value(rule)] = float(check.value)
            if not check.tripped:
                self.armed.add(rule)
            elif rule not in LEVEL_RULES or rule in self.armed:
                active.add(rule)
                if rule not in self.active:
                    out[keys.health_fired(rule)] = 1.0
                    self._announce(step, rule, check)
        self.active = active
        out[keys.HEALTH_ALARMS] = float(len(active))
        self._remember(view, step, measured)
        if evaluating and (rewards := self.history.get(keys.REWARD_MEAN)):
            self.levels[step] = mean(rewards[-self.cfg.window :])  # what reward_hacking compares at this step
        return out

    def final(self, eval_after: dict | None, step: int) -> list[dict]:
        """The held-out evaluation after training against the last held-out point (reward_hacking);
        the alarms it announces."""
        if "reward_hacking" not in self.rules or not eval_after:
            return []
        metrics = {k: v for k, v in eval_after.items() if k in EVAL_KEYS}
        last = self.before if self.cfg.eval_rows else self.heldout
        check = RULE_FUNCTIONS["reward_hacking"](View(metrics, self.history, self.cfg.window, last), self.cfg)
        if check is None or not check.tripped:
            return []
        self._announce(step, "reward_hacking", check, when="after training")
        return self.alarms[-1:]

    def _announce(self, step: int, rule: str, check: Check, when: str = "") -> None:
        line = f"relay: health: step {step}{' ' + when if when else ''}: {rule}: {check.detail}"
        if rule in self.cfg.stop_on and not when:
            self.halt = self.halt or rule
            line += "; stopping after this step's checkpoint (health.stop_on)"
        self.alarms.append({"step": step, "rule": rule, "value": check.value, "line": line})
        self.say(line)

    def _remember(self, view: View, step: int, measured: int) -> None:
        for key in TRACKED:
            if (v := view.get(key)) is not None:
                kept = self.history.setdefault(key, [])
                kept.append(v)
                del kept[: -max(2 * self.cfg.window, self.cfg.zero_adv_steps, self.cfg.zero_adv_min_groups)]
        value = next((e for key in EVAL_KEYS if (e := view.get(key)) is not None), None)
        rewards = self.history.get(keys.REWARD_MEAN, [])
        if value is not None:  # a held-out evaluation of `measured`'s weights: the next comparison starts there
            level = view.level if view.level is not None else mean(rewards[-self.cfg.window :])
            self.heldout = {"step": measured, "value": value, "reward": level}
            if self.best is None or value >= self.best["value"]:
                self.best = self.heldout
        for point in (self.before, self.heldout):
            if point is not None and point["reward"] is None and rewards:
                point["reward"] = rewards[0]

    def state_dict(self) -> dict:
        """What a checkpoint keeps, so a resumed run compares with the steps before it."""
        return {
            "history": {k: list(v) for k, v in self.history.items()},
            "active": sorted(self.active),
            "armed": sorted(self.armed),
            "before": dict(self.before) if self.before else None,
            "heldout": dict(self.heldout) if self.heldout else None,
            "best": dict(self.best) if self.best else None,
            "alarms": list(self.alarms),
        }

    def load_state_dict(self, state: dict) -> None:
        self.history = {k: list(v) for k, v in state.get("history", {}).items()}
        self.active, self.armed = set(state.get("active", ())), set(state.get("armed", ()))
        self.before = dict(state["before"]) if state.get("before") else self.before
        self.heldout = dict(state["heldout"]) if state.get("heldout") else None
        self.best = dict(state["best"]) if state.get("best") else self.heldout
        self.alarms = list(state.get("alarms", ()))
