"""reward_model.*: a pool of RewardModel actors that score every training sample next to the
reward function (actors/reward_model.py), and the checks of these keys.

Two kinds: `classifier`, a sequence classifier with one label (a Bradley-Terry style RM) that
reads each sample re-rendered with its own tokenizer and chat template; `judge`, a generative
model on one of relay's engines whose answer to a prompt built from `judge.template` is parsed
into a number. The rule reward and the score combine as
`rule_weight * rule_reward + weight * rm_score`, unless the task's reward function takes an
`rm_score` argument, in which case it combines them itself. The checks are in
relay/config/validate_reward_model.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from relay.config.engine_registry import EngineName

# Fields a judge template may name: the prompt (its last user message), the response, the row's answer.
JUDGE_FIELDS = ("prompt", "response", "ground_truth")


@dataclass(frozen=True)
class JudgeConfig:
    # A str.format template of the user message the judge reads; it may name {prompt}, {response}
    # and {ground_truth}. Required for kind=judge.
    template: str | None = None
    engine: EngineName = "hf"
    # How the judge's answer becomes a number: a parser of relay/config/verdicts.py, number (the
    # last number in it) or yes_no (1.0 for an answer starting with yes, 0.0 for no), or a dotted
    # path to a function of the text. An answer
    # the parser cannot read is a counted reward error (rm/errors), never a crash.
    parser: str = "number"
    max_new_tokens: int = 16
    engine_kwargs: dict[str, Any] = field(default_factory=dict)  # passed to the judge's engine untouched


@dataclass(frozen=True)
class RewardModelConfig:
    # None: no reward model. A local HF folder, a hub name, or `tiny-rm` (the classifier for the
    # built-in arithmetic task shipped in relay/models/shipped/, built by relay.rewards.build_rm).
    path: str | None = None
    kind: Literal["classifier", "judge"] = "classifier"
    weight: float = 1.0  # reward = rule_weight * rule reward + weight * rm_score
    rule_weight: float = 1.0  # 0: train on the reward model alone (the rule still measures held-out accuracy)
    micro_batch_size: int = 32  # samples per classifier forward pass (or judge generate call)
    max_length: int = 1024  # tokens of a rendered sample the classifier reads; longer ones keep their end
    # Scores divided by a running standard deviation after the running mean is taken off (over
    # every batch so far), so `weight` means the same whatever scale the RM's logits have.
    normalize: bool = False
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    trust_remote_code: bool = False
    judge: JudgeConfig = JudgeConfig()
