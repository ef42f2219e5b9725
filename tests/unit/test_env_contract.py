"""The environment and reward-function contract, called as users wrote it (no relay import in
their code), and what happens to rewards and updates that fail."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch

from relay import BaseEnvironment, Trajectory
from relay.agent.loop import AgentLimits, AgentLoop
from relay.config import ConfigError, load_config
from relay.config.user_code import check_env_class, check_reward_fn
from relay.engines.base import SamplingParams
from relay.envs.base import EnvRunner
from relay.envs.contract import EnvConfig, EnvMaker, seed_rows
from relay.envs.scoring import Scorer, neutralize_reward_errors, trainable
from relay.envs.trajectory import reward_value
from relay.failures import FailureWatch, RunFailed
from relay.models.tokenizer import build_tiny_tokenizer
from relay.run.step_metrics import eval_metrics
from relay.types import Sample
from tests.agent_scripts import EOS, ScriptedEngine


class GuessEnv:
    """The plain form: one constructor argument read by attribute, reset() with no arguments and
    its setup drawn from the global RNG, no relay import."""

    def __init__(self, config):
        self.max_turns = config.max_turns
        self.calls = 0

    def reset(self) -> str:
        self.target = random.randint(0, 99)
        self.noise = float(np.random.rand())
        self.turn = 0
        return f"guess {self.target}"

    def step(self, action: str) -> tuple:
        self.turn += 1
        right = action.strip() == str(self.target)
        done = right or self.turn >= self.max_turns
        return self.get_state_description(), (1.0 if right else 0.0), done, {"right": right}

    def get_state_description(self) -> str:
        return f"turn {self.turn}"

    def get_prompt_prefix(self) -> str:
        return ""


def compute_reward(trajectory, environment):
    return sum(trajectory.rewards) + 0.01 * environment.turn  # the episode's own instance, after its last step


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer()


def play(tok, maker, rows, n, script, max_turns=3):
    runner = EnvRunner(maker)
    loop = AgentLoop(
        ScriptedEngine(tok, script),
        tok,
        AgentLimits(max_turns=max_turns, max_tokens_per_turn=16, max_total_tokens=200),
        env_reset=runner.reset,
        env_step=runner.step,
        env_close=runner.close,
    )
    return runner, loop.run(rows, SamplingParams(), n=n)


def test_seeds_form_groups_share_their_setup_and_the_reward_gets_the_instance(tok):
    maker = EnvMaker(GuessEnv, {"max_turns": 2})
    rows = seed_rows(3, seed=0)
    # the model reads the target from the prompt on its second turn only
    runner, samples = play(
        tok, maker, rows, n=4, script=lambda turn, text: ("0" if turn == 0 else text.split()[-1]) + EOS
    )
    firsts = [s.meta["env"]["first_observation"] for s in samples]
    for g in range(3):
        assert len(set(firsts[4 * g : 4 * g + 4])) == 1  # one problem per GRPO group
    assert len(set(firsts)) == 3
    rewards, errors, metrics = Scorer(compute_reward, runner).score(samples)
    assert errors == [None] * 12 and metrics == {"reward/errors": 0.0}
    traj = Trajectory.from_sample(samples[0])
    assert len(traj.states) == len(traj.actions) == len(traj.rewards) == len(traj.dones)
    assert traj.states[0] == firsts[0] and traj.dones[-1] is True
    assert all(
        r == pytest.approx(sum(s.meta["env"]["rewards"]) + 0.01 * len(s.meta["env"]["rewards"]))
        for r, s in zip(rewards, samples)
    )
    assert traj.response_text == samples[0].response_text  # Sample fields read through the trajectory
    assert traj.summary()["env_steps"] == len(traj.actions)


def test_constructor_and_reset_forms():
    seen = {}

    class NoArgs:
        def reset(self):
            return "a"

        def step(self, action):
            return "", 0.0, True, {}

    class Seeded(BaseEnvironment):
        def __init__(self, config, seed=None):
            super().__init__(config)
            seen["init"] = (self.config.level, seed)

        def reset(self, seed=None):
            seen["reset"] = seed
            return "b"

    class Rows:
        def reset(self, room, **rest):
            seen["row"] = (room, rest)
            return room

        def step(self, action):
            return "", 0.0, True, {}

    assert EnvMaker(NoArgs).reset(EnvMaker(NoArgs).new(), {"seed": 5}, 5) == "a"
    m = EnvMaker(Seeded, {"level": {"name": "x"}})
    assert not m.reusable and m.reset(m.new(7), {"seed": 7}, 7) == "b"
    assert seen["init"] == ({"name": "x"}, 7) and seen["reset"] == 7
    assert EnvMaker(Rows).reset(Rows(), {"room": "hall", "n": 1}, 3) == "hall" and seen["row"] == ("hall", {"n": 1})
    assert EnvConfig({"a": {"b": 1}}).a.b == 1
    with pytest.raises(AttributeError, match="task.env_config has no key 'nope'"):
        _ = EnvConfig({}).nope


def test_signature_checks_name_the_problem(tmp_path, monkeypatch):
    assert check_env_class(GuessEnv) is None
    assert "at most one argument" in check_env_class(
        type("Two", (), {"__init__": lambda self, a, b: None, "reset": len, "step": len})
    )
    assert "no step()" in check_env_class(type("Half", (), {"reset": lambda self: ""}))
    assert check_reward_fn(compute_reward) is None and check_reward_fn(lambda t: 0) is None
    assert "needs 3 arguments" in check_reward_fn(lambda a, b, c: 0)
    (tmp_path / "userrew.py").write_text("def three(a, b, c):\n    return 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError) as e:
        load_config(None, ["task.reward_fn=userrew:three"])
    assert "task.reward_fn: three(a, b, c) needs 3 arguments" in str(e.value)


@pytest.mark.parametrize(
    "raw, shown",
    [
        (float("nan"), "nan"),
        (float("inf"), "inf"),
        ("abc", "'abc' (str)"),
        (None, "None"),
        (torch.tensor(float("nan")), "nan"),
    ],
)
def test_bad_rewards_are_errors_with_their_value(raw, shown):
    value, why = reward_value(raw)
    assert value == 0.0 and shown in why
    assert reward_value(np.float32(0.5)) == (0.5, None) and reward_value(torch.tensor(2.0)) == (2.0, None)


def test_failed_rewards_are_neutralized(capsys):
    calls = iter([1.0, float("nan"), 0.0, "x", 3.0, 5.0])
    samples = [
        Sample([1], [2, 3], [0.0, 0.0], [1, 1], group_id=g, meta={"episode_id": str(i)})
        for i, g in enumerate([0, 0, 0, 1, 1, 2])
    ]
    scorer = Scorer(lambda sample, env: next(calls))
    rewards, errors, metrics = scorer.score(samples)
    assert metrics["reward/errors"] == 2.0 and "reward is nan" in errors[1] and "'x' (str), not a number" in errors[3]
    assert "reward error on episode 1 (group 0)" in capsys.readouterr().out
    for s, r, e in zip(samples, rewards, errors):
        s.reward, s.reward_error = r, e
    trained = trainable(samples)  # neutralized copies of the failed ones: the samples stay as scored, for the logs
    assert trained[0] is samples[0] and trained[1] is not samples[1] and samples[1].loss_mask == [1, 1]
    assert trained[1].reward == 0.5 and trained[1].loss_mask == [0, 0] and trained[3].reward == 3.0
    assert neutralize_reward_errors(samples) == 2
    assert samples[1].reward == 0.5 and samples[1].loss_mask == [0, 0]  # the group's valid mean, no gradient
    assert samples[3].reward == 3.0 and samples[0].loss_mask == [1, 1]
    assert all(math.isfinite(s.reward) for s in samples)


def test_failure_watch_stops_after_k_failed_steps_in_a_row():
    bad = [Sample([1], finish_reason="env_error", meta={"env": {"error": "environment raised in step: KeyError: 'x'"}})]
    watch = FailureWatch(3)
    watch.check(bad, {"env/errors": 1.0})
    watch.check(bad, {"env/errors": 0.0})  # a good step resets the streak
    watch.check(bad, {"env/errors": 1.0})
    watch.check(bad, {"env/errors": 1.0})
    with pytest.raises(
        RunFailed, match="environment error for 3 steps in a row; the last: environment raised in step: KeyError"
    ):
        watch.check(bad, {"env/errors": 1.0})
    watch = FailureWatch(2)
    skipped = {"actor/skipped_steps": 1.0, "actor/optimizer_steps": 0.0, "actor/skipped_nonfinite_loss": 1.0}
    watch.check(bad, skipped)
    with pytest.raises(RunFailed, match="the loss was not finite"):
        watch.check(bad, skipped)
    FailureWatch(0).check(bad, {"env/errors": 1.0})  # 0: never stops


def test_env_tasks_evaluate_mean_return_and_success_rate():
    cfg = load_config(None, ["task.name=custom", "task.env=relay.envs.textgame:TextGameEnv"])
    assert eval_metrics(cfg.task, [1.5, 0.0, -0.5, 1.0]) == {"eval/success_rate": 0.5, "eval/mean_return": 0.5}
    assert eval_metrics(load_config(None, []).task, [1.0, 0.0]) == {"eval/accuracy": 0.5}
