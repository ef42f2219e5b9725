"""Multi-turn rollouts on local Ray: RolloutWorker + ToolExecutor pool + EnvPool, real sandbox.

Uses the math_tool and textgame warm-started tiny models shipped in the repository.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import ray

from actors.env import EnvPool
from actors.rollout import RolloutWorker
from relay.config import load_config
from relay.config.role_settings import RolloutSettings
from relay.envs.math_tool import make_rows
from relay.envs.textgame import TextGameEnv
from relay.run.model_source import resolve_model_path
from relay.tools.calls import ToolCall
from relay.tools.sandbox import SandboxConfig, sandbox_available
from relay_trainer.pools import create_group, create_tool_executors, threads

REPO = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.skipif(not sandbox_available(SandboxConfig())[0], reason="the code sandbox cannot be built here"),
    pytest.mark.usefixtures("shared_ray"),
]


def math_cfg(*overrides):
    return load_config(
        REPO / "configs/math_tool.yaml",
        ["rollout.n=2", "tools.executors.cpus=0.1", "resources.env.cpus=0.1", "resources.rollout.cpus=0.5", *overrides],
    )


def start(cfg, run_name, tools=True):
    groups = []
    executors = create_tool_executors(cfg, run_name, groups) if tools else []
    env = create_group(EnvPool, "env", cfg.resources.env, run_name, lambda i: (cfg.task,), groups)
    path = resolve_model_path(cfg.model, cfg.task, cfg.tools, cfg.critic, cfg.reward_model)
    [worker] = create_group(
        RolloutWorker,
        "rollout",
        cfg.resources.rollout,
        run_name,
        lambda i: (RolloutSettings.of(cfg), path, i, threads(cfg, cfg.resources.rollout), env[0], executors),
        groups,
    )
    return worker, env[0], executors, groups


def stop(*handles, groups=()):
    for h in handles:
        ray.kill(h)
    for pg in groups:
        ray.util.remove_placement_group(pg)


def check_tool_episodes(samples):
    called = [s for s in samples if s.tool_calls]
    assert called, [s.turn_texts for s in samples]
    for s in called:
        for call in s.tool_calls:
            if call["name"] == "python" and call["ok"]:
                assert call["seconds"] > 0  # a real sandboxed run
        # the observation the model saw is the sandbox's actual output of the model's code
        code = s.tool_calls[0]["arguments"]["code"] if s.tool_calls[0]["name"] else None
        if code and re.fullmatch(r"print\(\d+\*\d+\)", code) and s.tool_calls[0]["ok"]:
            a, b = map(int, re.findall(r"\d+", code))
            assert f"<result>\n{a * b}\n</result>" in s.response_text
        first_end = s.turn_spans[0][1]
        if len(s.turn_spans) > 1:  # observation tokens between the turns carry no loss
            assert set(s.loss_mask[first_end : s.turn_spans[1][0]]) == {0}
    return called


def test_rollout_worker_runs_tool_calls_in_the_real_sandbox():
    cfg = math_cfg()
    worker, env, executors, groups = start(cfg, "test-mt-sandbox")
    try:
        rows = make_rows(12, seed=5)
        samples, metrics = ray.get(worker.rollout.remote(rows, 0, first_group_id=0))
        assert len(samples) == 24 and sorted({s.group_id for s in samples}) == list(range(12))
        check_tool_episodes(samples)
        assert metrics["agent/tool_calls"] > 0 and metrics["agent/turns"] > 1
        assert sum(
            metrics[f"agent/finish_{r}"] for r in ("stop", "length", "max_turns", "budget", "env_error")
        ) == pytest.approx(1.0)
        # the worker had its EnvPool score every episode (the reward sums the environment's rewards)
        rewards, errors = [s.reward for s in samples], [s.reward_error for s in samples]
        assert errors == [None] * len(samples) and all(r in (0.0, 1.0) for r in rewards)
        for s, r in zip(samples, rewards):
            assert r == sum(s.meta["env"]["rewards"])
        # greedy evaluation goes through the same loop
        greedy, _ = ray.get(worker.rollout.remote(rows[:4], 0, first_group_id=0, greedy=True))
        assert len(greedy) == 4
        # hostile and over-reaching calls come back as data from the real executor
        results = ray.get(
            executors[0].run_batch.remote(
                [
                    ToolCall("python", {"code": "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=2)"}),
                    ToolCall("python", {"code": "print(1)", "timeout": 99999}),
                    ToolCall("python", {"code": "while True: pass"}),
                    ToolCall("nope", {}),
                ]
            )
        )
        assert [r.ok for r in results] == [False, False, False, False]
        assert "unexpected argument 'timeout'" in results[1].error
        assert results[2].seconds < 30  # killed by the configured limit (cpu_seconds=2 / wall 5 s)
    finally:
        stop(worker, env, *executors, groups=groups)


def test_tool_server_path():
    from relay.config import ToolServerConfig
    from relay.tools.server import ToolServer

    with ToolServer(ToolServerConfig(port=0, sandbox_limits=SandboxConfig(wall_timeout_s=5, cpu_seconds=2))) as server:
        cfg = math_cfg(f"tools.server_url={server.url}", "tools.max_retries=0")
        worker, env, executors, groups = start(cfg, "test-mt-server")
        assert executors == []
        try:
            samples, metrics = ray.get(worker.rollout.remote(make_rows(8, seed=6), 0, first_group_id=0))
            check_tool_episodes(samples)
            assert server.health()["served"] > 0
        finally:
            stop(worker, env, groups=groups)


def test_unbuildable_sandbox_fails_before_other_actors():
    cfg = math_cfg("tools.sandbox_limits.python=/nonexistent/python3")
    groups = []
    with pytest.raises(RuntimeError, match="tools.sandbox=none") as info:
        create_tool_executors(cfg, "test-mt-nosandbox", groups)
    assert "the tool executors could not start" in str(info.value)
    for pg in groups:
        ray.util.remove_placement_group(pg)


def test_textgame_env_episodes_with_per_turn_rewards():
    cfg = load_config(
        REPO / "configs/textgame.yaml", ["rollout.n=2", "resources.env.cpus=0.1", "resources.rollout.cpus=0.5"]
    )
    worker, env, _, groups = start(cfg, "test-mt-game", tools=False)
    try:
        rows = TextGameEnv.make_rows(8, seed=9)
        samples, metrics = ray.get(worker.rollout.remote(rows, 0, first_group_id=0))
        assert len(samples) == 16 and metrics["agent/env_steps"] >= 1
        multi = [s for s in samples if len(s.turn_spans) > 1]
        assert multi
        for s in samples:
            env_rewards = s.meta["env"]["rewards"]
            assert sum(s.token_rewards.values()) == pytest.approx(sum(env_rewards))
            assert set(s.token_rewards) <= {end - 1 for _, end in s.turn_spans}
            assert s.finish_reason in ("stop", "max_turns", "length", "budget")
        rewards, errors = [s.reward for s in samples], [s.reward_error for s in samples]  # scored on the EnvPool
        assert rewards == [pytest.approx(sum(s.meta["env"]["rewards"])) for s in samples] and not any(errors)
    finally:
        stop(worker, env, groups=groups)
