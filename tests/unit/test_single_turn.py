"""Single-turn rollouts are the agent loop (relay/agent/loop.py) with no parser and no environment:
what RolloutWorker runs for tasks without tools or an environment."""

from __future__ import annotations

import pytest

from relay.agent.loop import AgentLimits, AgentLoop
from relay.engines.base import SamplingParams
from relay.envs.chat import ChatFormat


@pytest.fixture(scope="module")
def hf_engine(tiny_model_path):
    from relay.engines.hf import HFEngine

    return HFEngine(tiny_model_path)


@pytest.mark.parametrize("max_tokens", [2, 6])
def test_single_turn_samples_what_one_engine_call_of_n_samples_does(hf_engine, max_tokens):
    """A single-turn rollout is the loop with no parser and no environment (what RolloutWorker
    runs): its Samples hold exactly what one engine call with n samples per prompt returns."""
    tok = hf_engine.tokenizer
    rows = [{"prompt": "12+34", "ground_truth": "46"}, {"prompt": "5+6", "ground_truth": 11}]
    sampling = SamplingParams(n=4, temperature=1.0, seed=11, max_tokens=max_tokens)
    prompts = [ChatFormat(tok).prompt_ids([{"role": "user", "content": r["prompt"]}]) for r in rows]
    groups = hf_engine.generate(prompts, sampling)
    limits = AgentLimits(max_turns=1, max_tool_turns=0, max_tokens_per_turn=max_tokens, max_total_tokens=max_tokens)
    samples = AgentLoop(hf_engine, tok, limits).run(rows, sampling, first_group_id=3)
    expected = [(i, c) for i, group in enumerate(groups) for c in group]
    assert len(samples) == len(expected) == 8
    for s, (i, c) in zip(samples, expected):
        assert (s.prompt_ids, s.response_ids, s.rollout_logprobs) == (prompts[i], c.token_ids, c.logprobs)
        assert s.loss_mask == [1] * len(c.token_ids) and s.turn_spans == [(0, len(c.token_ids))]
        assert s.finish_reason == c.finish_reason and s.group_id == 3 + i and s.ground_truth == rows[i]["ground_truth"]
        text = tok.decode(c.token_ids, skip_special_tokens=True)
        assert s.response_text == s.final_text == text and s.turn_texts == [text]
    if max_tokens == 2:  # the tiny model's answers and EOS take 3 tokens or more
        assert "length" in {s.finish_reason for s in samples}
    else:
        assert "stop" in {s.finish_reason for s in samples}
