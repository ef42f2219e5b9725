"""The checks of reward_model.* and resources.reward_model (relay/config/reward_model.py), each
problem naming its key. The folder itself (a sequence classifier? a chat template?) is checked by
relay.models.check.check_reward_model before Ray starts."""

from __future__ import annotations

import string

from relay.config.dotted import check_dotted, resolve_dotted
from relay.config.engine_registry import engine_import_error
from relay.config.reward_model import JUDGE_FIELDS, JudgeConfig
from relay.config.schema import Config
from relay.config.user_code import wants_rm_score
from relay.config.verdicts import VERDICT_PARSERS


def validate_reward_model(cfg: Config) -> list[str]:
    """reward_model.* and resources.reward_model; nothing when reward_model.path is null."""
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
            p.append(f"reward_model.judge.parser: not one of {sorted(VERDICT_PARSERS)} nor a function: {err}")
    if judge.max_new_tokens < 1:
        p.append(f"reward_model.judge.max_new_tokens: must be >= 1, got {judge.max_new_tokens}")
    if (err := engine_import_error(judge.engine)) is not None:
        p.append(f"reward_model.judge.engine: {err}")
    return p


def template_fields(template: str) -> set[str] | None:
    """The field names a str.format template uses, or None when it does not parse."""
    try:
        return {name.split(".")[0].split("[")[0] for _, name, _, _ in string.Formatter().parse(template) if name}
    except ValueError:
        return None


def takes_rm_score(cfg: Config) -> bool:
    """Whether the task's reward function combines the reward model's score itself (an `rm_score` parameter)."""
    if cfg.reward_model.path is None:
        return False
    dotted = cfg.task.reward_fn_path
    return check_dotted(dotted) is None and wants_rm_score(resolve_dotted(dotted))
