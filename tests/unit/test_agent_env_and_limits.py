"""The agent loop with environments and limits (relay/agent/loop.py): a crashing environment or a
failed reset is counted data, environment turns render as user turns with per-turn rewards,
limits end episodes with their finish reasons, a budget cut keeps an exact prefix, and many
episodes share one generate call per turn. Scripted engine: tests/agent_scripts.py."""

from __future__ import annotations

import pytest

from relay.agent.loop import AgentLimits, AgentLoop
from relay.agent.metrics import episode_metrics, tool_call_counts
from relay.engines.base import SamplingParams
from relay.envs.base import EnvRunner, episode_return
from relay.envs.chat import ChatFormat, encode_scripted
from relay.envs.math_tool import OUTCOMES, MathToolEnv, episode_outcome
from relay.envs.textgame import WEAPONS, TextGameEnv
from relay.models.tokenizer import build_tiny_tokenizer
from relay.tools.parsers import get_parser
from tests.agent_scripts import (
    EOS,
    Flaky,
    ScriptedEngine,
    calculator,
    check_exact,
    decoded,
    env_loop,
    rendered,
)


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer()


def test_env_exception_is_data_and_the_rollout_goes_on(tok):
    engine = ScriptedEngine(tok, lambda turn, text: f"act{turn}" + EOS)
    runner = EnvRunner(Flaky)
    samples = env_loop(engine, tok, runner).run([{"explode": True}, {"explode": False}], SamplingParams(), n=1)
    bad, good = samples
    assert bad.finish_reason == "env_error" and "the game server crashed" in bad.meta["env"]["error"]
    assert bad.meta["env"]["rewards"] == [0.25] and episode_return(bad) == 0.25
    assert (
        good.finish_reason == "stop" and good.meta["env"]["rewards"] == [0.25] * 3 and good.meta["env"]["error"] is None
    )
    assert runner.live == {}  # every episode finished; its instance waits for the reward function
    handed = [runner.finished(s.meta["episode_id"]) for s in samples]
    assert [env is not None for env, _ in handed] == [True, True] and [reuse for _, reuse in handed] == [False, True]
    for env, reuse in handed:
        runner.recycle(env, reuse)
    assert len(runner.free) == 1  # the good instance serves again; the broken one never does
    for s in samples:
        check_exact(s, engine)


def test_env_turns_render_as_user_turns_with_per_turn_rewards(tok):
    engine = ScriptedEngine(tok, lambda turn, text: f"act{turn}" + EOS)
    [s] = env_loop(engine, tok, EnvRunner(Flaky)).run([{}], SamplingParams(), n=1)
    conversation = [{"role": "system", "content": "Play."}, {"role": "user", "content": "start"}]
    for k in range(3):
        conversation.append({"role": "assistant", "content": f"act{k}"})
        if k < 2:
            conversation.append({"role": "user", "content": f"obs {k + 1}"})
    assert decoded(tok, s) + "\n" == rendered(tok, conversation)
    # each step's reward sits on the last token (the EOS) of the turn that earned it
    assert s.token_rewards == {end - 1: 0.25 for _, end in s.turn_spans}
    assert all(s.response_ids[end - 1] == tok.eos_token_id for _, end in s.turn_spans)
    assert s.meta["env"]["infos"] == [{"t": 1}, {"t": 2}, {"t": 3}]


def test_env_reset_failure_is_data(tok):
    class Broken(Flaky):
        def reset(self, **row):
            raise ValueError("no such level")

    engine = ScriptedEngine(tok, lambda turn, text: "x" + EOS)
    [s] = env_loop(engine, tok, EnvRunner(Broken)).run([{}], SamplingParams(), n=1)
    assert s.finish_reason == "env_error" and "no such level" in s.meta["env"]["error"]
    assert s.response_ids == [] and s.prompt_ids and engine.outputs == []


# ----------------------------------------------------------------------------------- limits


def test_limits_and_finish_reasons(tok):
    forever = lambda turn, text: "<tool>print(1)</tool>"  # 21 tokens, a call every turn
    cases = [  # limits -> finish reason, model turns, calls run
        (AgentLimits(max_turns=3, max_tool_turns=9, max_tokens_per_turn=30, max_total_tokens=1000), "max_turns", 3, 2),
        (AgentLimits(max_turns=9, max_tool_turns=2, max_tokens_per_turn=30, max_total_tokens=1000), "max_turns", 3, 2),
        (AgentLimits(max_turns=9, max_tool_turns=9, max_tokens_per_turn=10, max_total_tokens=1000), "length", 1, 0),
        (AgentLimits(max_turns=9, max_tool_turns=9, max_tokens_per_turn=30, max_total_tokens=60), "budget", 2, 1),
    ]
    for limits, reason, turns, ran in cases:
        engine = ScriptedEngine(tok, forever)
        loop = AgentLoop(engine, tok, limits, parser=get_parser("tag"), run_tools=calculator)
        [s] = loop.run([{"prompt": "loop"}], SamplingParams(), n=1)
        assert (s.finish_reason, len(s.turn_spans), len(s.tool_calls)) == (reason, turns, ran), limits
        assert len(s.response_ids) <= limits.max_total_tokens
        check_exact(s, engine)


class Talk:
    """Never done; its observations are `size` characters long."""

    def reset(self, size, **_):
        self.size = size
        return "go"

    def step(self, action):
        return "x" * self.size, 0.0, False, {}

    def get_state_description(self):
        return ""

    def get_prompt_prefix(self):
        return ""


def test_budget_cut_keeps_an_exact_prefix(tok):
    # Two episodes in one batch: the one with long observations has less room left than the
    # engine call's max_tokens, so its turn is cut to what fits (a prefix of a sample is a sample).
    fmt = ChatFormat(tok)
    long_obs = len(fmt.observation_ids([{"role": "user", "content": "x" * 30}], tok.eos_token_id))
    engine = ScriptedEngine(tok, lambda turn, text: "abcdefghij" + EOS)  # 11 tokens a turn
    runner = EnvRunner(Talk)
    limits = AgentLimits(max_turns=5, max_tokens_per_turn=11, max_total_tokens=11 + long_obs + 4)
    loop = AgentLoop(engine, tok, limits, env_reset=runner.reset, env_step=runner.step, env_close=runner.close)
    cut, roomy = loop.run([{"size": 30}, {"size": 1}], SamplingParams(), n=1)
    assert cut.finish_reason == "budget" and len(cut.response_ids) == limits.max_total_tokens
    assert cut.turn_spans[-1][1] - cut.turn_spans[-1][0] == 4
    check_exact(cut, engine, allow_cut_last=True)
    assert roomy.finish_reason == "budget" and len(roomy.turn_spans) >= 2
    check_exact(roomy, engine, allow_cut_last=True)
    assert runner.live == {}


def test_many_episodes_one_generate_call_per_turn(tok):
    calls = []

    class Counting(ScriptedEngine):
        def generate(self, prompts, sampling):
            calls.append((len(prompts), sampling.n, sampling.seed, sampling.stop))
            return super().generate(prompts, sampling)

    # episodes end at different turns: 1, 2 or 3 tool calls then an answer
    def script(turn, text):
        k = int(text.split("k=")[1][0])
        return "<tool>print(1)</tool>" if turn < k else "done" + EOS

    engine = Counting(tok, script)
    loop = AgentLoop(
        engine, tok, AgentLimits(max_turns=5, max_tokens_per_turn=30), parser=get_parser("tag"), run_tools=calculator
    )
    samples = loop.run([{"prompt": f"k={k}"} for k in (1, 2, 3)], SamplingParams(seed=5), n=2, first_group_id=10)
    assert [c[0] for c in calls] == [6, 6, 4, 2]  # live episodes per turn, one call each
    assert all(c[1] == 1 and c[3] == ("</tool>",) for c in calls)
    assert len({c[2] for c in calls}) == 4  # a fresh, reproducible seed per turn
    assert [s.group_id for s in samples] == [10, 10, 11, 11, 12, 12]
    assert [len(s.turn_spans) for s in samples] == [2, 2, 3, 3, 4, 4]
    m = episode_metrics(samples)
    assert m["agent/tool_calls"] == 2.0 and m["agent/turns"] == 3.0 and m["agent/finish_stop"] == 1.0
    assert tool_call_counts(samples) == {"tools/calls": 12.0, "tools/errors": 0.0}
    for s in samples:
        check_exact(s, engine)


# ----------------------------------------------------------------------------------- built-in tasks


def test_builtin_trajectories_use_the_loop_layout(tok):
    """Warm-start examples are laid out as the loop lays out episodes (same ids, same mask)."""
    fmt = ChatFormat(tok)
    traj = MathToolEnv.warm_start_episodes(40, 0)
    tool_traj = next(t for t in traj if len(t.turns) == 2)
    prompt, response, mask = encode_scripted(fmt, tool_traj)
    texts = [t.text for t in tool_traj.turns]
    engine = ScriptedEngine(tok, lambda turn, text: [texts[0], texts[1] + EOS][turn])
    loop = AgentLoop(engine, tok, AgentLimits(max_tokens_per_turn=40), parser=get_parser("tag"), run_tools=calculator)
    [s] = loop.run([{"prompt": tool_traj.prompt[0]["content"]}], SamplingParams(), n=1)
    assert (s.prompt_ids, s.response_ids, s.loss_mask) == (prompt, response, mask)

    game = TextGameEnv.warm_start_episodes(20, 0)
    assert {len(t.turns) for t in game} >= {1, 2, 3}
    env = TextGameEnv()
    row = TextGameEnv.make_rows(1, 3)[0]
    env.reset(**row)
    weapon = next(i for i in row["items"] if i in WEAPONS)
    assert env.step(f"take {weapon}")[1:3] == (0.5, False)
    assert env.step(f"attack {row['monster']}")[1:3] == (1.0, True)


def test_math_tool_env_rewards_exact_answers():
    env = MathToolEnv()
    row = MathToolEnv.make_rows(1, 0)[0]
    assert env.reset(**row) == row["prompt"] and "<tool>" in row["prompt"]
    assert env.step(row["ground_truth"])[1:3] == (1.0, True)
    env.reset(**row)
    assert env.step(row["ground_truth"] + "0")[1] == 0.0


# ----------------------------------------------------------------------------------- the real engine


def test_math_tool_episode_outcomes(tok):
    """Each way an episode can go is told apart (what benchmarks/math_tool_dip.py counts)."""
    scripts = {
        "copied": ["<tool>print(37*48)</tool>", "1776" + EOS],
        "guessed": ["1776" + EOS],
        "miscopied": ["<tool>print(37*48)</tool>", "1766" + EOS],
        "wrong_code": ["<tool>print(37*43)</tool>", "1591" + EOS],
        "wrong_guess": ["1766" + EOS],
        "unfinished": ["<tool>print(37*48)</tool>", "<tool>print(1)</tool>", "<tool>print(2)</tool>"],
    }
    row = {"prompt": "What is 37*48? You may run Python in <tool>...</tool>.", "ground_truth": "1776"}
    for expected, turns in scripts.items():
        engine = ScriptedEngine(tok, lambda turn, text, turns=turns: turns[min(turn, len(turns) - 1)])
        runner = EnvRunner(MathToolEnv)
        loop = AgentLoop(
            engine,
            tok,
            AgentLimits(max_turns=3, max_tool_turns=2, max_tokens_per_turn=32),
            parser=get_parser("tag"),
            run_tools=calculator,
            env_reset=runner.reset,
            env_step=runner.step,
            env_close=runner.close,
        )
        [sample] = loop.run([row], SamplingParams(seed=0), n=1)
        assert episode_outcome(sample) == expected, (expected, sample.response_text)
    assert set(scripts) == set(OUTCOMES)
