"""The chat-template checker (relay/models/template_check.py) on the shipped models and on templates
broken on purpose, and the refusal of multi-turn runs whose template drifts (relay/models/template_drift.py)."""

import copy

import pytest

from relay.config import ConfigError, load_config
from relay.models import shipped, template_drift
from relay.models.loading import load_tokenizer
from relay.models.template_check import check_template, main
from relay.models.tokenizer import CHAT_TEMPLATE, build_tiny_tokenizer
from tests.agent_scripts import QWEN_LIKE_TEMPLATE

# Llama-3-style: every message's content is trimmed, so a turn the model ended with "\n" re-renders shorter.
TRIMMING = CHAT_TEMPLATE.replace("{{ message.content }}<|im_end|>", "{{ message.content | trim }}<|im_end|>")
# Qwen3-style: the reasoning of an assistant turn is dropped once a later turn exists.
DROPS_REASONING = CHAT_TEMPLATE.replace(
    "{{ message.content }}<|im_end|>",
    "{% if message.role == 'assistant' and not loop.last %}{{ message.content.split('</think>')[-1] | trim }}"
    "{% else %}{{ message.content }}{% endif %}<|im_end|>",
)
MULTI_TURN = ["task.name=custom", "task.env=relay.envs.textgame:TextGameEnv"]


def check(cfg, model_path: str) -> None:
    """The driver's check (relay/run/model_source.py), given the sections it reads."""
    template_drift.check_template_drift(cfg.model, cfg.task, cfg.tools, model_path)


def with_template(template: str):
    tok = build_tiny_tokenizer()
    tok.chat_template = template
    return tok


def verdicts(tokenizer) -> dict[str, bool]:
    return {c.name: c.ok for c in check_template(tokenizer)}


@pytest.mark.parametrize("name", [shipped.BASE, *shipped.TASK_MODELS, shipped.RM_NAME])
def test_the_shipped_models_keep_relays_token_layout(name):
    assert verdicts(load_tokenizer(str(shipped.shipped_model(name)))) == dict.fromkeys(
        ["prefix", "generation prompt", "appended tokens"], True
    )


def test_a_qwen_like_template_with_grouped_tool_responses_passes():
    assert all(verdicts(with_template(QWEN_LIKE_TEMPLATE)).values())


def test_a_trimming_template_fails_where_the_model_ended_its_turn_with_a_newline():
    checks = {c.name: c for c in check_template(with_template(TRIMMING))}
    failed = checks["generation prompt"]
    assert not failed.ok and failed.where == "chat without tools, turn 4 (assistant)"
    # the first divergence, both sides, the differing token bracketed
    assert "template: ... '1' '0' '0' '.' ['<|im_end|>']" in failed.detail
    assert "relay:    ... '1' '0' '0' '.' ['\\n'] '<|im_end|>'" in failed.detail
    assert checks["prefix"].ok


def test_a_template_that_rewrites_earlier_turns_fails_the_prefix_and_the_appended_tokens():
    checks = {c.name: c for c in check_template(with_template(DROPS_REASONING))}
    assert checks["generation prompt"].ok
    for name in ("prefix", "appended tokens"):
        assert not checks[name].ok and checks[name].where.startswith("chat without tools")
        assert "template: ... 'a' 'n' 't' '\\n' ['8']" in checks[name].detail  # the template dropped <think>
        assert "relay:    ... 'a' 'n' 't' '\\n' ['<']" in checks[name].detail


def test_a_template_that_hides_the_assistants_content_is_reported_not_raised():
    checks = {c.name: c for c in check_template(with_template(CHAT_TEMPLATE.replace("{{ message.content }}", "x")))}
    assert not checks["appended tokens"].ok and "verbatim" in checks["appended tokens"].detail


def test_the_command_line_prints_one_line_per_check_and_exits_0_or_1(tmp_path, capsys):
    assert main(["tiny-math_tool"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:] == ["PASS prefix", "PASS generation prompt", "PASS appended tokens"]
    with_template(TRIMMING).save_pretrained(tmp_path)
    assert main([str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "PASS prefix" in out and "FAIL generation prompt [chat without tools, turn 4 (assistant)]" in out
    assert main([str(tmp_path / "missing.gguf")]) == 2
    assert "template_check: error: MODEL: no such GGUF file" in capsys.readouterr().err


@pytest.fixture
def drifting(tmp_path, monkeypatch):
    """A model folder whose template trims (the tiny model's files, the template changed), and a cache of its own."""
    monkeypatch.setenv("RELAY_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "trimming"
    tok = copy.deepcopy(load_tokenizer(str(shipped.shipped_model("tiny-textgame"))))
    tok.chat_template = TRIMMING
    tok.save_pretrained(folder)
    return str(folder)


def test_a_multi_turn_run_with_a_drifting_template_is_refused_in_one_line(drifting):
    with pytest.raises(ConfigError) as e:
        check(load_config(None, MULTI_TURN), drifting)
    [line] = e.value.problems
    assert line.startswith("model.path: ") and "generation prompt fails at chat without tools" in line
    assert "python -m relay.models.template_check" in line and "model.allow_template_drift=true" in line
    check(load_config(None, [*MULTI_TURN, "model.allow_template_drift=true"]), drifting)
    check(load_config(None, []), drifting)  # single-turn: nothing relies on it


def test_the_verdict_is_kept_so_the_tokenizer_loads_once_per_machine(drifting, monkeypatch):
    assert template_drift.template_verdict(drifting).startswith("generation prompt fails")
    monkeypatch.setattr("relay.models.loading.load_tokenizer", lambda *a, **k: pytest.fail("loaded again"))
    assert template_drift.template_verdict(drifting).startswith("generation prompt fails")


def test_a_single_turn_run_never_loads_a_tokenizer_for_the_check(monkeypatch):
    monkeypatch.setattr("relay.models.loading.load_tokenizer", lambda *a, **k: pytest.fail("loaded"))
    check(load_config(None, []), "/nowhere")
