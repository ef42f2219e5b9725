"""What the health monitor needs from a step's samples, read in the driver where the samples
already are (plain Python: no tensor, no extra actor call), as metrics every logger gets too.

A few microseconds per sample: one pass over the batch, a dict of groups and a count of texts.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict

from relay.run import metric_keys as keys
from relay.types import FinishReason, Sample

CUT = (FinishReason.LENGTH, FinishReason.BUDGET)  # the episode ran into a token cap


def batch_signals(samples: list[Sample], tools: bool = False, success_threshold: float = 1.0) -> dict[str, float]:
    """rollout/episodes, rollout/groups, response/truncated_frac, response/top_share, groups/zero_adv_frac,
    groups/solved_frac (every episode's reward at least `success_threshold`); with `tools` (a tool
    task) tools/calls_per_episode; with reward-model scores rm/rule_correlation."""
    if not samples:
        return {}
    n = len(samples)
    groups: dict[int, list[Sample]] = defaultdict(list)
    for s in samples:
        groups[s.group_id].append(s)
    # the groups each response text appears in: a text that takes over shows up across prompts,
    # while one prompt's group agreeing on its answer is ordinary convergence
    texts = Counter(text for g in groups.values() for text in {model_text(s) for s in g})
    out = {
        keys.EPISODES: float(n),
        keys.GROUPS: float(len(groups)),
        keys.TRUNCATED_FRAC: sum(s.finish_reason in CUT for s in samples) / n,
        keys.TOP_RESPONSE_SHARE: texts.most_common(1)[0][1] / len(groups),
        keys.ZERO_ADV_GROUPS: sum(len({s.reward for s in g}) == 1 for g in groups.values()) / len(groups),
        keys.SOLVED_GROUPS: sum(min(s.reward for s in g) >= success_threshold for g in groups.values()) / len(groups),
    }
    if tools:
        out[keys.TOOL_CALLS_PER_EPISODE] = sum(len(s.tool_calls) for s in samples) / n
    pairs = [(s.meta["rm_score"], s.meta["rule_reward"]) for s in samples if s.meta.get("rm_score") is not None]
    if (r := correlation(pairs)) is not None:
        out[keys.RM_RULE_CORRELATION] = r
    return out


def model_text(sample: Sample) -> str:
    """What the model wrote in the whole episode: every turn, so that a multi-turn policy that plays
    one sensible strategy (the same last move in every game it wins) is not one repeated string."""
    return "\n".join(t.strip() for t in sample.turn_texts) if sample.turn_texts else sample.final_text.strip()


def correlation(pairs: list[tuple[float, float]]) -> float | None:
    """Pearson's r of the pairs; None for fewer than 3 or when either side is constant."""
    if len(pairs) < 3:
        return None
    n = len(pairs)
    mx, my = sum(x for x, _ in pairs) / n, sum(y for _, y in pairs) / n
    sxy = sum((x - mx) * (y - my) for x, y in pairs)
    sxx, syy = sum((x - mx) ** 2 for x, _ in pairs), sum((y - my) ** 2 for _, y in pairs)
    if sxx <= 0 or syy <= 0:
        return None
    return sxy / math.sqrt(sxx * syy)
