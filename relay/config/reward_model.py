"""reward_model.*: a pool of RewardModel actors that score every training sample next to the
reward function (actors/reward_model.py), and the checks of these keys.

Two kinds: `classifier`, a sequence classifier with one label (a Bradley-Terry style RM) that
reads each sample re-rendered with its own tokenizer and chat template; `judge`, a generative
model on one of relay's engines whose answer to a prompt built from `judge.template` is parsed
into a number. The rule reward and the score combine as
`rule_weight * rule_reward + weight * rm_score`, unless the task's reward function takes an
`rm_score` argument, in which case it combines them itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from relay.config.schema import Config

# Fields a judge template may name: the prompt (its last user message), the response, the row's answer.
JUDGE_FIELDS = ("prompt", "response", "ground_truth")
# Built-in verdict parsers (relay/reward_model.py VERDICT_PARSERS); anything else is a dotted path.
VERDICT_PARSERS = ("number", "yes_no")


@dataclass(frozen=True)
class JudgeConfig:
    # A str.format template of the user message the judge reads; it may name {prompt}, {response}
    # and {ground_truth}. Required for kind=judge.
    template: str | None = None
    engine: Literal["hf", "vllm", "sglang"] = "hf"
    # How the judge's answer becomes a number: number (the last number in it), yes_no (1.0 for an
    # answer starting with yes, 0.0 for no), or a dotted path to a function of the text. An answer
    # the parser cannot read is a counted reward error (rm/errors), never a crash.
    parser: str = "number"
    max_new_tokens: int = 16
    engine_kwargs: dict[str, Any] = field(default_factory=dict)  # passed to the judge's engine untouched


@dataclass(frozen=True)
class RewardModelConfig:
    # None: no reward model. A local HF folder, a hub name, or `tiny-rm` (the classifier for the
    # built-in arithmetic task shipped in relay/models/shipped/, built by relay.models.build_rm).
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


def validate_reward_model(cfg: Config) -> list[str]:
    """reward_model.* and resources.reward_model, each problem naming its key. The folder itself
    (a sequence classifier? a chat template?) is checked by relay.models.check before Ray starts."""
    rm, p = cfg.reward_model, []
    if rm.path is None:
        return p
    if not rm.path.strip():
        p.append("reward_model.path: empty; give a folder, a hub name or tiny-rm (or leave it null: no reward model)")
    for key in ("micro_batch_size", "max_length"):
        if getattr(rm, key) < 1:
            p.append(f"reward_model.{key}: must be >= 1, got {getattr(rm, key)}")
    for key in ("weight", "rule_weight"):
        value = getattr(rm, key)
        if value != value or abs(value) == float("inf"):
            p.append(f"reward_model.{key}: must be a finite number, got {value}")
    if rm.weight == 0 and not takes_rm_score(cfg):
        p.append(
            "reward_model.weight: 0 ignores the reward model's score; set a weight or leave reward_model.path null"
        )
    res = cfg.resources.reward_model
    if res.count < 1:
        p.append(f"resources.reward_model.count: must be >= 1, got {res.count}")
    if not res.cpus > 0:
        p.append(f"resources.reward_model.cpus: must be > 0, got {res.cpus}")
    if res.gpus < 0:
        p.append(f"resources.reward_model.gpus: must be >= 0, got {res.gpus}")
    if takes_rm_score(cfg) and cfg.task.env is not None:
        p.append(
            "task.reward_fn takes rm_score, which needs no environment: with task.env the episode's environment is "
            "gone when the reward model scores; combine with reward_model.weight instead"
        )
    if rm.kind == "judge":
        p += _validate_judge(rm.judge)
    return p


def _validate_judge(judge: JudgeConfig) -> list[str]:
    from relay.config.dotted import check_dotted

    p = []
    if not judge.template or not judge.template.strip():
        p.append(
            "reward_model.judge.template: required with reward_model.kind=judge (the judge's prompt, "
            f"naming any of {{{'}, {'.join(JUDGE_FIELDS)}}})"
        )
    else:
        unknown = template_fields(judge.template) - set(JUDGE_FIELDS)
        if unknown is None:
            p.append("reward_model.judge.template: not a valid str.format template (unbalanced { or })")
        elif unknown:
            p.append(
                f"reward_model.judge.template: names {sorted(unknown)}; a template may name only {list(JUDGE_FIELDS)}"
            )
    if judge.parser not in VERDICT_PARSERS:
        err = check_dotted(judge.parser)
        if err is not None:
            p.append(f"reward_model.judge.parser: not one of {list(VERDICT_PARSERS)} nor a function: {err}")
    if judge.max_new_tokens < 1:
        p.append(f"reward_model.judge.max_new_tokens: must be >= 1, got {judge.max_new_tokens}")
    if judge.engine != "hf":
        from relay.config.validate import engine_import_error

        err = engine_import_error(judge.engine)
        if err is not None:
            p.append(f"reward_model.judge.engine: {err}")
    return p


def template_fields(template: str) -> set[str] | None:
    """The field names a str.format template uses, or None when it does not parse."""
    import string

    try:
        return {name.split(".")[0].split("[")[0] for _, name, _, _ in string.Formatter().parse(template) if name}
    except ValueError:
        return None


def takes_rm_score(cfg: Config) -> bool:
    """Whether the task's reward function combines the reward model's score itself (an `rm_score` parameter)."""
    if cfg.reward_model.path is None:
        return False
    from relay.config.dotted import check_dotted, resolve_dotted
    from relay.envs.trajectory import wants_rm_score

    dotted = cfg.task.reward_fn_path
    return check_dotted(dotted) is None and wants_rm_score(resolve_dotted(dotted))
