"""rollout.partial (docs/pipeline.md): the HF engine generates a turn in chunks, weights staged
mid-rollout load at the next pause, and every token records the version that sampled it.
Real tiny model; a few seconds."""

from __future__ import annotations

import random
import threading

import pytest
import torch

from relay.agent.loop import AgentLimits, AgentLoop
from relay.algos.losses import truncated_is_weights
from relay.config import ConfigError, load_config
from relay.config.engine_registry import engines_that
from relay.engines.base import SamplingParams
from relay.engines.hf import HFEngine
from relay.models.shipped import shipped_model
from relay.models.tokenizer import build_tiny_tokenizer
from relay.run.pipeline import sample_from_json, sample_to_json, staleness_metrics
from relay.tools.parsers import get_parser
from relay.types import Batch, Sample
from relay.weights.staged import StagedWeights
from tests.agent_scripts import EOS, ScriptedEngine, calculator


@pytest.fixture(scope="module")
def engine():
    torch.set_num_threads(1)
    return HFEngine(str(shipped_model("tiny")), "float32")


@pytest.fixture(scope="module")
def prompts(engine):
    """Random token prompts: the tiny model's answers to them run from 3 tokens to the limit."""
    rng, vocab = random.Random(0), engine.model.config.vocab_size
    return [[rng.randrange(3, vocab) for _ in range(rng.randrange(3, 9))] for _ in range(6)]


def perturbed(engine, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {k: v + 0.05 * torch.randn(v.shape, generator=g) for k, v in engine.model.state_dict().items()}


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("chunk", [1, 3])
def test_chunked_decoding_equals_one_generate_for_the_same_weights(engine, prompts, temperature, chunk):
    sampling = SamplingParams(n=4, temperature=temperature, max_tokens=16, seed=3)
    whole = engine.generate(prompts, sampling)
    chunked = engine.generate(prompts, sampling, chunk=chunk, between=lambda: None)
    lengths = set()
    for group_a, group_b in zip(whole, chunked):
        for a, b in zip(group_a, group_b):
            assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
            assert b.logprobs == pytest.approx(a.logprobs, abs=1e-4)
            assert b.versions == [engine.weight_version] * len(b.token_ids)
            lengths.add(len(a.token_ids))
    assert min(lengths) < 16 and max(lengths) == 16  # rows that end early and rows that run to the limit


def test_weights_staged_mid_turn_switch_token_versions_at_a_chunk_boundary(engine, prompts):
    """Staged from another thread (the worker's weight lane) after the first chunk; loaded by the
    rollout's own thread at the next pause. Each token's logprob is that of the weights that sampled it."""
    old = {k: v.clone() for k, v in engine.model.state_dict().items()}
    new = perturbed(engine, 1)
    staged, pauses = StagedWeights(0), []

    def pause():
        pauses.append(1)
        if len(pauses) == 2:  # the turn's first chunk is done: the weight lane stages version 1
            lane = threading.Thread(target=staged.stage, args=(1, lambda: engine.update_weights(new, 1) or 0.0))
            lane.start()
            lane.join()
        staged.load()

    rows = [{"prompt": "3+4="}, {"prompt": "12+30="}]
    limits = AgentLimits(max_turns=1, max_tool_turns=0, max_tokens_per_turn=12, max_total_tokens=12)
    loop = AgentLoop(engine, engine.tokenizer, limits, prompt_format="raw", partial_chunk=2, pause=pause)
    try:
        samples = loop.run(rows, SamplingParams(temperature=1.5, max_tokens=12, seed=5), n=4)
        assert staged.loads == 1 and engine.weight_version == 1
        mixed = [s for s in samples if len(s.response_ids) > 2]
        assert mixed, "some episode outlived the first chunk"
        for s in samples:
            assert s.token_versions == [0] * min(2, len(s.response_ids)) + [1] * max(0, len(s.response_ids) - 2)
            assert s.weight_version == 0  # the oldest token's
        # the logprob of each token under the weights of its version
        for version, weights in ((0, old), (1, new)):
            engine.update_weights(weights, version)
            for s in mixed:
                ids = torch.tensor([s.prompt_ids + s.response_ids])
                logits = engine.model(ids).logits[0, len(s.prompt_ids) - 1 : -1] / 1.5
                expected = torch.log_softmax(logits.float(), -1).gather(-1, ids[0, len(s.prompt_ids) :, None])[:, 0]
                for t, v in enumerate(s.token_versions):
                    if v == version:
                        assert s.rollout_logprobs[t] == pytest.approx(expected[t].item(), abs=1e-4)
        assert staleness_metrics(samples, 1)["weights/mixed_samples"] == len(mixed)
    finally:
        engine.update_weights(old, 0)


def test_observation_tokens_take_the_version_of_the_turn_before_them():
    tok = build_tiny_tokenizer()
    engine = ScriptedEngine(tok, lambda turn, text: "<tool>print(1)</tool>" if turn == 0 else "done" + EOS)
    engine.weight_version = 3

    def pause():  # new weights between the two turns
        if engine.outputs:
            engine.weight_version = 4

    limits = AgentLimits(max_turns=3, max_tokens_per_turn=30)
    loop = AgentLoop(engine, tok, limits, parser=get_parser("tag"), run_tools=calculator, pause=pause)
    (s,) = loop.run([{"prompt": "go"}], SamplingParams(seed=0), n=1)
    (a, b), (c, d) = s.turn_spans
    assert s.token_versions[a:c] == [3] * (c - a)  # the first turn and the tool result after it
    assert s.token_versions[c:d] == [4] * (d - c)
    assert s.weight_version == 3


def test_token_versions_survive_the_pipeline_json_round_trip():
    s = Sample(prompt_ids=[1], response_ids=[2, 3, 4], loss_mask=[1, 1, 1], rollout_logprobs=[0.0] * 3)
    s.token_versions, s.weight_version = [2, 2, 3], 2
    assert sample_from_json(sample_to_json(s)).token_versions == [2, 2, 3]


def test_tis_weights_of_a_mixed_sample_by_hand():
    """Decoupled PPO: the importance weight of each token divides the learner's proximal logprob by
    the behaviour logprob of the weights that sampled that token, capped at tis_cap."""
    s = Sample(
        prompt_ids=[1, 2],
        response_ids=[5, 6, 7, 8],
        loss_mask=[1, 1, 1, 1],
        rollout_logprobs=[-1.0, -0.5, -2.0, -3.0],  # tokens 0-1 sampled by v3, tokens 2-3 by v4
        token_versions=[3, 3, 4, 4],
    )
    batch = Batch.from_samples([s], pad_id=0)
    old = torch.tensor([[-1.2, -0.1, -2.0, -1.0]])  # the learner's logprobs on the weights the update starts from
    w = truncated_is_weights(old, batch.rollout_logprobs, cap=2.0)
    # exp(-1.2 + 1.0), exp(-0.1 + 0.5), exp(0), exp(-1.0 + 3.0) = 7.39 capped at 2
    assert w[0].tolist() == pytest.approx([0.818731, 1.491825, 1.0, 2.0], abs=1e-5)


def problems(overrides: list[str]) -> list[str]:
    try:
        load_config("configs/default.yaml", overrides)
    except ConfigError as e:
        return e.problems
    return []


def test_partial_needs_an_overlapped_mode_tis_cap_and_a_chunking_engine():
    base = ["training.mode=async", "algorithm.tis_cap=2.0", "rollout.partial=true"]
    assert problems(base) == []
    assert problems(["training.mode=async", "rollout.partial=true"]) == []  # a null tis_cap: 2.0 in async
    text = "\n".join(problems(["rollout.partial=true", "rollout.partial_chunk=0", "resources.weight_sync=broadcast"]))
    assert "rollout.partial_chunk: must be >= 1" in text
    assert "training.mode one_step_off or async, not sync" in text
    assert "set resources.weight_sync=object_store" in text
    [off] = problems(["training.mode=async", "rollout.partial=true", "algorithm.tis_cap=0"])
    assert off.startswith("rollout.partial: tokens sampled by older weights need importance weights")
    # vLLM generates in chunks too (tests/engines/test_vllm_partial.py); SGLang's capability record
    # says it cannot (whether or not either is installed here)
    assert problems([*base, "rollout.engine=vllm"]) == []
    can = ", ".join(engines_that(lambda c: c.partial_rollouts))  # hf, vllm
    assert (
        f"rollout.partial: the sglang engine cannot generate in chunks and load weights between them (engines that can: {can})"
    ) in problems([*base, "rollout.engine=sglang"])
