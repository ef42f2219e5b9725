"""Continuous batching in the agent loop (AgentLoop.stream): a group leaves as soon as its
last episode ends, waiting rows start in its place, the engine never runs more than `max_live`
episodes at once, and every episode is the one a single batch would have produced, token for token."""

from __future__ import annotations

import pytest

from relay.agent.loop import AgentLimits, AgentLoop
from relay.engines.base import SamplingParams
from relay.models.tokenizer import build_tiny_tokenizer
from relay.tools.parsers import get_parser
from tests.agent_scripts import EOS, ScriptedEngine, calculator, check_exact


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer()


def script(turn, text):
    """An episode of the row "k=<k>" calls a tool k times, then answers: it lasts k + 1 turns."""
    k = int(text.split("k=")[1][0])
    return "<tool>print(1)</tool>" if turn < k else "done" + EOS


class Counting(ScriptedEngine):
    def __init__(self, tokenizer):
        super().__init__(tokenizer, script)
        self.batches: list[list[str]] = []  # per generate call: the k of every episode in it

    def generate(self, prompts, sampling):
        self.batches.append([self.tokenizer.decode(p).split("k=")[1][0] for p in prompts])
        return super().generate(prompts, sampling)


def tool_loop(engine, tok):
    limits = AgentLimits(max_turns=5, max_tokens_per_turn=30)
    return AgentLoop(engine, tok, limits, parser=get_parser("tag"), run_tools=calculator)


ROWS = [{"prompt": f"k={k}"} for k in (3, 1, 1, 2)]


def test_stream_hands_out_each_group_as_it_ends_and_refills_the_engine(tok):
    engine = Counting(tok)
    yielded = []  # (group ids, generate calls made when the group came out)
    for group in tool_loop(engine, tok).stream(ROWS, SamplingParams(seed=3), n=2, max_live=4, first_group_id=10):
        assert len({s.group_id for s in group}) == 1 and len(group) == 2
        yielded.append((group[0].group_id, len(engine.batches)))
        for s in group:
            check_exact(s, engine)
    # rows 0 (k=3) and 1 (k=1) start; row 1 ends after 2 calls and row 2 (k=1) takes its place;
    # rows 0 and 2 end after call 4, then row 3 (k=2) runs alone for its 3 turns
    assert yielded == [(11, 2), (10, 4), (12, 4), (13, 7)]
    assert engine.batches == [["3", "3", "1", "1"]] * 2 + [["3", "3", "1", "1"]] * 2 + [["2", "2"]] * 3
    assert max(len(b) for b in engine.batches) <= 4


def test_a_limited_stream_makes_the_episodes_one_batch_makes(tok):
    """The same episodes, token for token, with the engine full (max_live 0) or refilled (max_live 2)."""

    def episodes(max_live):
        engine = Counting(tok)
        samples = tool_loop(engine, tok).run(ROWS, SamplingParams(seed=3), n=2, max_live=max_live)
        return [(s.group_id, s.response_ids, s.loss_mask, s.rollout_logprobs) for s in samples], engine.batches

    whole, whole_batches = episodes(0)
    refilled, refilled_batches = episodes(2)
    assert refilled == whole and [g for g, *_ in whole] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert [len(b) for b in whole_batches] == [8, 8, 4, 2]  # the slowest episode holds the last calls
    assert max(len(b) for b in refilled_batches) == 2 and len(refilled_batches) == 4 + 2 + 2 + 3


def test_environment_episodes_stream_and_each_is_closed_once(tok):
    """Environment episodes (EnvRunner, in process) under a cap of 2 live: an episode that hits
    an environment error ends its group early, the next row starts in its place, and every
    episode's environment is reset once and handed back once (env_close per finished group)."""
    from relay.envs.base import EnvRunner
    from tests.agent_scripts import Flaky, env_loop

    runner, resets, closes = EnvRunner(Flaky), [], []
    reset, close = runner.reset, runner.close
    runner.reset = lambda ids, rows: resets.append(list(ids)) or reset(ids, rows)
    runner.close = lambda ids: closes.append(list(ids)) or close(ids)
    engine = ScriptedEngine(tok, lambda turn, text: f"act{turn}" + EOS)
    rows = [{"explode": True}, {"explode": False}, {"explode": False}]
    groups = list(env_loop(engine, tok, runner).stream(rows, SamplingParams(), n=1, max_live=2))
    assert [g[0].group_id for g in groups] == [0, 1, 2]  # row 0 fails at its 2nd step, row 2 takes its place
    assert [g[0].finish_reason for g in groups] == ["env_error", "stop", "stop"]
    assert resets == [["ep-0-0", "ep-1-0"], ["ep-2-0"]]
    assert sorted(i for ids in closes for i in ids) == ["ep-0-0", "ep-1-0", "ep-2-0"]
    assert runner.live == {}
