"""Reward models, the pure parts: what a reward model reads, how a judge's verdict becomes a
number, the running normalisation of scores and how they combine with the rule reward.

    messages = conversation(sample)                        # the prompt's messages + the model's turns, as text
    text = judge_prompt(template, sample)                  # kind=judge: the judge's user message
    score = parse_verdict("number", "Score: 7")            # 7.0; ValueError for a malformed verdict
                                                           # (the parsers: relay/config/verdicts.py)
    norm = RunningMeanStd(); scores = norm.normalize(scores)   # reward_model.normalize
    reward = combine(rule_reward, score, rule_weight, weight)

A reward model never reads the policy's token ids: its own tokenizer renders `conversation`
with its own chat template (the two tokenizers may differ). The models themselves are in
relay/rewards/scorers.py; the actors in actors/reward_model.py, the driver's pool of them in
relay_trainer/reward_model_pool.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from relay.config.dotted import resolve_dotted
from relay.config.verdicts import VERDICT_PARSERS, shown
from relay.types import Sample


def conversation(sample: Sample) -> list[dict[str, str]]:
    """The episode as chat messages: the prompt's messages (the system prompt included) and then
    the model's turns as assistant messages; an environment's observations between them as user
    messages. Tool results are inside the response text of the turn that read them."""
    messages = [dict(m) for m in sample.meta.get("messages") or []]
    env = sample.meta.get("env")
    if env is None or not env.get("actions"):
        return [*messages, {"role": "assistant", "content": sample.response_text}]
    observations = list(env.get("observations", []))
    for i, action in enumerate(env["actions"]):
        messages.append({"role": "assistant", "content": action})
        if i < len(observations) and i + 1 < len(env["actions"]):
            seen = observations[i]  # the user's next message, or chat messages (tool results)
            messages += seen if isinstance(seen, list) else [{"role": "user", "content": seen}]
    return messages


def last_user_message(messages: list[dict[str, str]]) -> str:
    return next((m["content"] for m in reversed(messages) if m.get("role") == "user"), "")


def judge_prompt(template: str, sample: Sample) -> str:
    """The judge's user message: `template` with {prompt} (the last user message of the prompt),
    {response} (the whole response text) and {ground_truth} (the row's answer, '' if none)."""
    prompt = last_user_message(sample.meta.get("messages") or [])
    truth = "" if sample.ground_truth is None else str(sample.ground_truth)
    return template.format(prompt=prompt, response=sample.response_text, ground_truth=truth)


def verdict_parser(name: str) -> Callable[[str], float]:
    """A built-in parser by name (relay/config/verdicts.py), or the user's function named by dotted
    path (text -> number)."""
    if name in VERDICT_PARSERS:
        return VERDICT_PARSERS[name]
    return resolve_dotted(name)


def parse_verdict(parser: Callable[[str], Any] | str, text: str) -> float:
    """The judge's verdict as a finite float; ValueError (with the text) for anything else."""
    fn = verdict_parser(parser) if isinstance(parser, str) else parser
    value = fn(text)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"the parser gave {value!r} for the verdict {shown(text)}, not a finite number")
    return float(value)


class RunningMeanStd:
    """Mean and variance over every score seen so far (Chan et al.'s parallel update, batch by batch)."""

    def __init__(self, eps: float = 1e-8):
        self.count, self.mean, self.var, self.eps = 0, 0.0, 1.0, eps

    def update(self, values: list[float]) -> None:
        if not values:
            return
        n = len(values)
        mean = math.fsum(values) / n
        var = math.fsum((v - mean) ** 2 for v in values) / n
        if self.count == 0:
            self.count, self.mean, self.var = n, mean, var
            return
        total = self.count + n
        delta = mean - self.mean
        self.var = (self.var * self.count + var * n + delta**2 * self.count * n / total) / total
        self.mean += delta * n / total
        self.count = total

    def normalize(self, values: list[float]) -> list[float]:
        """Update with `values`, then return them standardised by the running statistics."""
        self.update(values)
        std = math.sqrt(self.var) + self.eps
        return [(v - self.mean) / std for v in values]

    def state_dict(self) -> dict[str, float]:
        return {"count": self.count, "mean": self.mean, "var": self.var}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.count, self.mean, self.var = int(state["count"]), float(state["mean"]), float(state["var"])


def combine(rule_reward: float, rm_score: float, rule_weight: float, weight: float) -> float:
    """reward_model.weight's combination: rule_weight * rule reward + weight * reward-model score."""
    return rule_weight * rule_reward + weight * rm_score


def score_metrics(scores: list[float | None], errors: int) -> dict[str, float]:
    """rm/score_mean and rm/score_std over the samples that have a score (before normalisation), rm/errors."""
    valid = [s for s in scores if s is not None]
    mean = math.fsum(valid) / len(valid) if valid else float("nan")
    std = math.sqrt(math.fsum((s - mean) ** 2 for s in valid) / len(valid)) if valid else float("nan")
    return {"rm/score_mean": mean, "rm/score_std": std, "rm/errors": float(errors)}
