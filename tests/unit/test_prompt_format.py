"""task.prompt_format (relay/envs/chat.py): plain prompts for base models, and training.eval_before."""

from __future__ import annotations

import contextlib
import json
import math
from types import SimpleNamespace

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from relay.agent.loop import AgentLimits, AgentLoop
from relay.config import ConfigError, load_config
from relay.engines.base import Completion, SamplingParams
from relay.envs import chat
from relay.envs.chat import ChatFormat, resolve_prompt_format
from relay.models.tokenizer import build_tiny_tokenizer
from relay.run.summary import summarize

TEXTS = ["3+4=", "12 + 7 =", "what is 9+9?\nanswer:", ""]


def _without_template():
    tok = build_tiny_tokenizer()
    tok.chat_template = None
    return tok


def _with_bos_and_no_template():
    """A base-model-like tokenizer: no chat template, a BOS token added in front of every text."""
    vocab = {tok: i for i, tok in enumerate(["<s>", "</s>", *sorted(pre_tokenizers.ByteLevel.alphabet())])}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.add_special_tokens(["<s>", "</s>"])
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    core.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", eos_token="</s>")


TOKENIZERS = {
    "tiny, with template": build_tiny_tokenizer,
    "tiny, no template": _without_template,
    "bos, no template": _with_bos_and_no_template,
}


@pytest.mark.parametrize("name", list(TOKENIZERS))
@pytest.mark.parametrize("text", TEXTS)
def test_raw_prompts_are_exactly_the_tokenizers_ids_for_the_text(name, text):
    tok = TOKENIZERS[name]()
    ids = ChatFormat(tok, prompt_format="raw").prompt_ids([{"role": "user", "content": text}])
    assert ids == tok(text).input_ids
    if name.startswith("bos"):  # the tokenizer's own special tokens are kept
        assert ids[0] == tok.bos_token_id and ids[1:] == tok(text, add_special_tokens=False).input_ids


def test_raw_prompt_with_a_system_prompt_is_both_texts_one_per_line():
    tok = build_tiny_tokenizer()
    messages = [{"role": "system", "content": "Add."}, {"role": "user", "content": "3+4="}]
    assert ChatFormat(tok, prompt_format="raw").prompt_ids(messages) == tok("Add.\n3+4=").input_ids


def test_auto_is_chat_with_a_template_and_raw_without_with_one_notice(capsys, monkeypatch):
    monkeypatch.setattr(chat, "_noticed_auto_raw", False)
    tok = build_tiny_tokenizer()
    messages = [{"role": "user", "content": "3+4="}]
    auto = ChatFormat(tok, prompt_format="auto")
    assert auto.prompt_format == "chat"
    assert auto.prompt_ids(messages) == ChatFormat(tok).prompt_ids(messages)
    assert capsys.readouterr().err == ""
    bare = _without_template()
    for _ in range(3):
        assert resolve_prompt_format("auto", bare) == "raw"
    assert ChatFormat(bare, prompt_format="auto").prompt_ids(messages) == bare("3+4=").input_ids
    notice = capsys.readouterr().err.splitlines()
    assert len(notice) == 1 and "no chat template" in notice[0] and "task.prompt_format" in notice[0]


def test_chat_stays_the_default_of_chat_format_and_needs_a_template():
    assert ChatFormat(build_tiny_tokenizer()).prompt_format == "chat"
    with pytest.raises(ValueError):
        ChatFormat(_without_template(), prompt_format="chat").prompt_ids([{"role": "user", "content": "1+1="}])
    with pytest.raises(ValueError, match="prompt_format"):
        resolve_prompt_format("plain", build_tiny_tokenizer())


def test_single_turn_agent_loop_feeds_raw_prompts_to_the_engine():
    tok = _with_bos_and_no_template()
    seen = []

    class Engine:
        weight_version = 0

        def generate(self, prompts, params):
            seen.extend(prompts)
            return [[Completion(token_ids=[tok.eos_token_id], logprobs=[0.0], finish_reason="stop")] for _ in prompts]

    limits = AgentLimits(max_turns=1, max_tool_turns=0, max_tokens_per_turn=4, max_total_tokens=4)
    loop = AgentLoop(Engine(), tok, limits, prompt_format="raw")
    rows = [{"prompt": "3+4=", "ground_truth": "7"}, {"prompt": "5+6=", "ground_truth": "11"}]
    samples = loop.run(rows, SamplingParams(n=2))
    assert seen == [tok("3+4=").input_ids] * 2 + [tok("5+6=").input_ids] * 2
    assert [s.prompt_ids for s in samples] == seen


def test_multi_turn_with_raw_prompts_fails_naming_the_key():
    with pytest.raises(ValueError, match="task.prompt_format"):
        AgentLoop(
            object(),
            build_tiny_tokenizer(),
            AgentLimits(),
            env_reset=lambda ids, rows: [],
            env_step=lambda ids, actions: [],
            prompt_format="raw",
        )
    with pytest.raises(ConfigError) as e:
        load_config(None, ["tools.enabled=true", "task.prompt_format=raw"])
    assert [p for p in e.value.problems if p.startswith("task.prompt_format:")]
    with pytest.raises(ConfigError) as e:
        load_config(None, ["task.prompt_format=plain"])
    assert [p for p in e.value.problems if p.startswith("task.prompt_format:")]
    assert load_config(None).task.prompt_format == "auto"
    assert load_config(None, ["tools.enabled=true", "task.prompt_format=auto"]).task.prompt_format == "auto"


# ------------------------------------------------------------------------------ training.eval_before


def test_summary_without_an_evaluation_before_shows_nan(tmp_path):
    summary = summarize([0.1, 0.2, 0.5, 0.6], {}, {"eval/accuracy": 0.75}, tmp_path)
    assert math.isnan(summary["accuracy_before"]) and summary["accuracy_after"] == 0.75
    assert summary["health_alarms"] == []


def test_summary_names_the_health_alarms(tmp_path, capsys):
    alarm = {"step": 2, "rule": "reward_collapse", "value": 0.0, "line": "relay: health: step 2: ..."}
    summary = summarize([0.8, 0.0], {}, {"eval/accuracy": 0.0}, tmp_path, alarms=[alarm])
    assert summary["health_alarms"] == [{"step": 2, "rule": "reward_collapse", "value": 0.0}]
    assert json.loads((tmp_path / "summary.json").read_text())["health_alarms"] == summary["health_alarms"]
    assert "health alarms: reward_collapse" in capsys.readouterr().out


@pytest.mark.parametrize("eval_before", [True, False])
def test_train_skips_the_evaluation_before_when_off(tmp_path, monkeypatch, eval_before):
    """The loop (relay_trainer/loop.py train) with its Ray-facing calls replaced: the held-out evaluation runs before training
    only with training.eval_before, and the run's summary holds NaN for the before-values without it."""
    from relay_trainer import loop

    evaluated_at = []  # the number of steps trained when each evaluation ran
    trained = []

    def fake_train_step(cfg, actors, plan, step, *args):
        trained.append(step)
        return {loop.keys.REWARD_MEAN: 0.5}

    def fake_evaluate(actors, held_out, rows):
        evaluated_at.append(len(trained))
        return {"eval/accuracy": 0.25 * (1 + len(trained))}

    learner = SimpleNamespace(state=SimpleNamespace(remote=lambda: ({}, {})), _actor_id="learner-0")
    monkeypatch.setattr(loop, "connect", lambda cfg: None)
    monkeypatch.setattr(
        loop,
        "actor_pools",
        lambda *a: contextlib.nullcontext(
            SimpleNamespace(learner=learner, critic=None, faults=SimpleNamespace(take=dict, restorable=set()))
        ),
    )
    monkeypatch.setattr(loop, "sync_weights", lambda actors, version: None)
    monkeypatch.setattr(loop, "evaluate", fake_evaluate)
    monkeypatch.setattr(loop, "step_plan", lambda *a: SimpleNamespace(state_dict=lambda: None))
    monkeypatch.setattr(loop, "train_step", fake_train_step)
    monkeypatch.setattr(loop, "publish_ray_metrics", lambda *a: None)
    monkeypatch.setattr(loop, "save_training_checkpoint", lambda *a, **k: tmp_path / "checkpoint")
    cfg = load_config(
        None,
        [
            f"run.output_dir={tmp_path}",
            "training.steps=2",
            "checkpoint.save_hf_model=false",
            f"training.eval_before={str(eval_before).lower()}",
        ],
    )
    summary = loop.train(cfg)
    assert trained == [0, 1]
    assert evaluated_at == ([0, 2] if eval_before else [2])
    assert summary["accuracy_after"] == 0.75
    if eval_before:
        assert summary["accuracy_before"] == 0.25
    else:
        assert math.isnan(summary["accuracy_before"])
