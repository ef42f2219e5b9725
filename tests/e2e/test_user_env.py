"""A user's own environment, written to the environment contract with no relay import, trains first try;
rewards that are NaN are counted and never trained on; a run of nothing but failures stops and says why."""

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from safetensors.torch import load_file

from relay.config import load_config
from relay.failures import RunFailed
from relay_trainer import loop

REPO = Path(__file__).resolve().parents[2]

USER_ENV = '''
import random


class AdditionEnv:
    """The BaseEnvironment contract, as a user writes it (no relay import)."""

    def __init__(self, config):
        self.max_turns = config.max_turns

    def reset(self) -> str:
        self.a, self.b = random.randint(0, 99), random.randint(0, 99)
        self.turn = 0
        return f"{self.a}+{self.b}"

    def step(self, action: str) -> tuple:
        self.turn += 1
        correct = action.strip() == str(self.a + self.b)
        done = correct or self.turn >= self.max_turns
        return self.get_state_description(), 1.0 if correct else 0.0, done, {"correct": correct}

    def get_state_description(self) -> str:
        return f"{self.a}+{self.b}"

    def get_prompt_prefix(self) -> str:
        return ""


def compute_reward(trajectory, environment):
    """Compute reward for a trajectory."""
    total_reward = sum(trajectory.rewards)
    return total_reward
'''

USER_CONFIG = """
run: {name: mine, output_dir: runs}
model: {path: tiny}
task:
  name: custom
  env: userpkg.envs:AdditionEnv
  reward_fn: userpkg.envs:compute_reward
  env_config: {max_turns: 1}
  num_eval_rows: 8
rollout: {n: 8, max_new_tokens: 6, max_turns: 1, max_total_tokens: 16}
training: {steps: 4, prompts_per_step: 4, micro_batch_size: 128}
checkpoint: {every: 0, save_hf_model: false}
logging: {console: true, jsonl: true}
"""


def metrics(run_dir) -> list[dict]:
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def test_the_seeds_environment_trains_with_no_rows_file(tmp_path):
    (tmp_path / "userpkg").mkdir()
    (tmp_path / "userpkg" / "__init__.py").write_text("")
    (tmp_path / "userpkg" / "envs.py").write_text(textwrap.dedent(USER_ENV))
    (tmp_path / "mine.yaml").write_text(USER_CONFIG)
    # as a user runs it: from their own project folder, with nothing on PYTHONPATH
    proc = subprocess.run(
        [sys.executable, str(REPO / "driver.py"), "--config", "mine.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "success rate" in proc.stdout and "mean return" in proc.stdout
    steps = metrics(tmp_path / "runs" / "mine")
    assert len(steps) == 4
    assert all(m["env/errors"] == 0 and m["reward/errors"] == 0 for m in steps)
    assert max(m["reward/std"] for m in steps) > 0  # the groups are mixed: there is something to learn
    assert "eval/success_rate" not in steps[-1] or 0 <= steps[-1]["eval/success_rate"] <= 1


NAN_WHEN_WRONG = "tests.e2e.user_rewards:nan_when_wrong"
ALWAYS_NAN = "tests.e2e.user_rewards:always_nan"


SMALL = [
    "training.prompts_per_step=4",
    "rollout.n=8",
    "task.num_eval_rows=8",
    "training.steps=3",
    "logging.console=false",
]


def test_nan_rewards_are_counted_and_never_reach_the_weights(tmp_path, ray_session):
    cfg = load_config(
        REPO / "configs/default.yaml",
        [f"run.output_dir={tmp_path}", *SMALL, f"task.reward_fn={NAN_WHEN_WRONG}", "checkpoint.every=3"],
    )
    summary = loop.train(cfg)
    steps = metrics(summary["run_dir"])
    assert sum(m["reward/errors"] for m in steps) > 0  # wrong answers: NaN, counted
    assert all(math.isfinite(m["reward/mean"]) and math.isfinite(m.get("actor/loss", 0.0)) for m in steps)
    weights = load_file(Path(summary["run_dir"]) / "checkpoints" / "step_00000003" / "policy.safetensors")
    assert all(t.isfinite().all() for t in weights.values())


def test_a_run_of_nothing_but_reward_errors_stops_and_says_why(tmp_path, ray_session):
    cfg = load_config(
        REPO / "configs/default.yaml",
        [f"run.output_dir={tmp_path}", *SMALL, "training.steps=10", f"task.reward_fn={ALWAYS_NAN}"],
    )
    with pytest.raises(
        RunFailed, match=r"reward function failed on every sample for 3 steps in a row; the last: .*nan"
    ):
        loop.train(cfg)
    assert len(metrics(tmp_path / "tiny-grpo")) == 2  # logged until the third failed step stopped it
