"""What one model turn's tool calls can cost: at most tools.max_calls_per_turn runs (the rest are
one error the model reads), and an episode with many calls does not go ahead of the others' first
calls (the agent loop hands calls to the runners round-robin across episodes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from relay.agent.episode import capped_calls, round_robin
from relay.agent.loop import AgentLimits, AgentLoop
from relay.config import ConfigError, load_config
from relay.engines.base import SamplingParams
from relay.models.tokenizer import build_tiny_tokenizer
from relay.tools.calls import ToolCall
from relay.tools.parsers import get_parser
from relay.tools.registry import ToolResult
from tests.agent_scripts import EOS, ScriptedEngine

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer()


def calls_text(codes: list[str]) -> str:
    return "[" + ", ".join(f'python(code="{c}")' for c in codes) + "]"


def recorder(ran: list[str]):
    def run_tools(calls: list[ToolCall]) -> list[ToolResult]:
        ran.extend(c.arguments["code"] for c in calls)
        return [ToolResult(True, f"ran {c.arguments['code']}\n", None, 0.0) for c in calls]

    return run_tools


def test_calls_past_the_cap_do_not_run_and_are_one_error_the_model_reads(tok):
    seen, ran = [], []

    def script(k, text):
        seen.append(text)
        return [calls_text([f"c{i}" for i in range(20)]) + EOS, "done" + EOS][min(k, 1)]

    limits = AgentLimits(max_tokens_per_turn=2000, max_total_tokens=4000, max_calls_per_turn=4)
    loop = AgentLoop(
        ScriptedEngine(tok, script), tok, limits, parser=get_parser("function_call"), run_tools=recorder(ran)
    )
    [s] = loop.run([{"prompt": "hi"}], SamplingParams(), n=1)
    assert ran == ["c0", "c1", "c2", "c3"]
    assert [c["ok"] for c in s.tool_calls] == [True] * 4 + [False]
    assert s.tool_calls[-1]["error"] == "16 tool calls past the limit of 4 per turn were not run"
    assert "ran c3" in seen[1] and "16 tool calls past the limit of 4 per turn were not run" in seen[1]


def test_one_episodes_many_calls_go_after_the_others_first_calls(tok):
    ran = []

    def script(k, text):
        if k:
            return "done" + EOS
        name = next(w for w in ("hostile", "good0", "good1", "good2") if w in text)
        return calls_text([f"{name}-{i}" for i in range(6 if name == "hostile" else 2)]) + EOS

    limits = AgentLimits(max_tokens_per_turn=2000, max_total_tokens=4000)
    loop = AgentLoop(
        ScriptedEngine(tok, script), tok, limits, parser=get_parser("function_call"), run_tools=recorder(ran)
    )
    rows = [{"prompt": p} for p in ("hostile", "good0", "good1", "good2")]
    samples = loop.run(rows, SamplingParams(), n=1)
    assert ran[:4] == ["hostile-0", "good0-0", "good1-0", "good2-0"], ran
    assert ran[4:8] == ["hostile-1", "good0-1", "good1-1", "good2-1"] and len(ran) == 12
    # Each episode still reads its own results, in its own order.
    for s, row in zip(samples, rows):
        got = [c["arguments"]["code"] for c in s.tool_calls]
        assert got == [f"{row['prompt']}-{i}" for i in range(len(got))] and all(c["ok"] for c in s.tool_calls)


def test_round_robin_and_cap_helpers():
    assert round_robin([3, 0, 1, 2]) == [(0, 0), (2, 0), (3, 0), (0, 1), (3, 1), (0, 2)]
    assert round_robin([]) == [] and round_robin([0, 0]) == []
    calls = [ToolCall("python", {"code": str(i)}) for i in range(3)]
    assert capped_calls(calls, ["e"], 3) == (calls, ["e"])
    assert capped_calls(calls, [], 1) == (calls[:1], ["2 tool calls past the limit of 1 per turn were not run"])
    with pytest.raises(ValueError, match="invalid agent limits"):
        AgentLimits(max_calls_per_turn=0)


def test_the_setting_is_checked_and_read():
    with pytest.raises(ConfigError) as err:
        load_config(REPO / "configs/math_tool.yaml", ["tools.max_calls_per_turn=0"])
    assert err.value.problems == ["tools.max_calls_per_turn: must be >= 1, got 0"]
    cfg = load_config(REPO / "configs/math_tool.yaml", ["tools.max_calls_per_turn=2"])
    assert AgentLimits.of(cfg.rollout, cfg.tools).max_calls_per_turn == 2
