"""relay from Python, as users write it: every snippet of docs/python.md and the README's
quick start, in the shape users of other PPO setups write them (quick start, detailed usage,
"what you can do", "testing"), with `from relay import X` for their
import line and the tiny model for theirs. The quick start runs as a script outside the repository
(its classes pickled by value, Ray started by the trainer); the rest runs here."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from relay import (
    BaseEnvironment,
    ConfigStore,
    EnvironmentConfig,
    RayPPOTrainer,
    RolloutData,
    Trajectory,
    algo,
)
from relay.algos.advantages import compute_advantages
from relay.config import ConfigError
from tests.example_envs import TextGameEnv

QUICK_START = '''
import json, random, sys
from pathlib import Path

from relay import BaseEnvironment, EnvironmentConfig, ConfigStore, RayPPOTrainer


class MyEnvironment(BaseEnvironment):
    def __init__(self, config: EnvironmentConfig):
        super().__init__(config)

    def reset(self) -> str:
        """Reset and return initial observation."""
        self.a, self.b = random.randint(0, 99), random.randint(0, 99)
        return f"{self.a}+{self.b}"

    def step(self, action: str) -> tuple:
        """Execute action and return (observation, reward, done, info)."""
        reward = 1.0 if action.strip() == str(self.a + self.b) else 0.0
        return "New state", reward, True, {}

    def get_state_description(self) -> str:
        return f"{self.a}+{self.b}"


def compute_reward(trajectory, environment):
    """Compute reward for a trajectory."""
    total_reward = sum(trajectory.rewards)
    return total_reward


config = ConfigStore()
config.model.model_name = "tiny"
config.model.dtype = "float32"
config.inference.max_tokens = 6
config.inference.temperature = 1.0
config.training.learning_rate = 1e-4
config.training.batch_size = 32
config.training.clip_ratio = 0.2
config.checkpoint.output_dir = sys.argv[1]
config.checkpoint.save_interval = 1
config.rollout.max_total_tokens = 16
config.task.num_eval_rows = 8
config.logging.console = False

env = MyEnvironment(config.environment)
trainer = RayPPOTrainer(config=config, environment=env, reward_fn=compute_reward, dataset=None)
summary = trainer.fit(num_epochs=2)
for metric_dict in trainer.metrics_history:
    print(f"Epoch {metric_dict['epoch']}: {metric_dict['policy_loss']}")

trainer.save_checkpoint(Path(sys.argv[1]) / "epoch_2")
loaded_step = trainer.load_checkpoint(Path(sys.argv[1]) / "epoch_2")
trainer.save_checkpoint(Path(sys.argv[1]) / "epoch_2_again")
import ray
run_name = trainer.run_dir.name
trainer.cleanup()
print(json.dumps({
    "summary": summary,
    "history": [{k: m[k] for k in ("epoch", "step", "policy_loss", "reward/mean")} for m in trainer.metrics_history],
    "loaded_step": loaded_step,
    "ray_running_after_cleanup": ray.is_initialized(),
}))
'''


def digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def test_the_quick_start_trains_saves_loads_and_cleans_up_from_a_script(tmp_path):
    (tmp_path / "train.py").write_text(QUICK_START)
    proc = subprocess.run(
        [sys.executable, "train.py", str(tmp_path / "out")], cwd=tmp_path, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    history = result["history"]
    assert [m["step"] for m in history] == [1, 2] and [m["epoch"] for m in history] == [1, 2]
    assert all(isinstance(m["policy_loss"], float) for m in history)
    assert "Epoch 1: " in proc.stdout and "Epoch 2: " in proc.stdout
    assert 0 <= result["summary"]["success_rate_after"] <= 1
    # checkpoint.save_interval=1 epoch: one checkpoint per step, and the copies equal the run's last
    run_dir = Path(result["summary"]["run_dir"])
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step_00000001", "step_00000002"]
    saved, again = tmp_path / "out" / "epoch_2", tmp_path / "out" / "epoch_2_again"
    assert result["loaded_step"] == 2
    assert digests(saved) == digests(run_dir / "checkpoints" / "step_00000002") == digests(again)
    assert result["ray_running_after_cleanup"] is False  # the trainer started Ray, so cleanup stopped it


# ------------------------------------------------------------------------------ the trainer, here


def small(config: ConfigStore, out: Path) -> ConfigStore:
    config.model.model_name = "tiny"
    config.checkpoint.output_dir = str(out)
    config.inference.max_tokens = 4
    config.inference.max_turns = 2
    config.rollout.n = 4
    config.rollout.max_total_tokens = 48
    config.training.batch_size = 16
    config.task.num_eval_rows = 4
    config.checkpoint.save_hf_model = False
    config.logging.console = False
    return config


@pytest.mark.slow  # the quick start above runs the same calls on the default task
def test_the_text_game_example_trains_and_cleanup_leaves_no_actor(tmp_path, ray_session):
    import ray

    config = small(ConfigStore(), tmp_path)
    env = TextGameEnv(config.environment)
    trainer = RayPPOTrainer(config, env, reward_fn=lambda t: sum(t.rewards))
    trainer.fit(num_epochs=3)
    assert [m["epoch"] for m in trainer.metrics_history] == [1, 2, 3]
    # a second fit continues the run from its last checkpoint: steps 4 and 5, epochs 4 and 5
    trainer.fit(num_epochs=1, num_iters_per_epoch=2)
    assert [(m["step"], m["epoch"]) for m in trainer.metrics_history][3:] == [(4, 4), (5, 4)]
    trainer.cleanup()
    prefix = f"{trainer.run_dir.name}/"
    assert not [a for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith(prefix)]
    assert ray.is_initialized()  # the test's own Ray: not the trainer's to stop


def test_fit_reports_config_mistakes_at_once_before_any_actor_starts(tmp_path):
    config = small(ConfigStore(), tmp_path)
    config.training.learning_rte = 1e-5
    config.model.device = "cuda"
    config.ray.use_ray = False
    config.training.batch_size = 30  # not a multiple of rollout.n=4
    with pytest.raises(ConfigError) as err:
        RayPPOTrainer(config, TextGameEnv).fit(num_epochs=1)
    problems = err.value.problems
    assert len(problems) == 4, problems
    assert "training.learning_rte: unknown key (did you mean training.learning_rate?)" in problems or any(
        p.startswith("training.learning_rte: unknown key") for p in problems
    )
    assert any(p.startswith("model.device=cuda:") and "resources.learner.gpus" in p for p in problems)
    assert any(p.startswith("ray.use_ray=false:") and "resources.colocate" in p for p in problems)
    assert any(p.startswith("training.batch_size:") and "training.prompts_per_step" in p for p in problems)
    with pytest.raises(ConfigError, match="save_checkpoint: nothing trained yet"):
        RayPPOTrainer(config, TextGameEnv).save_checkpoint(tmp_path / "nowhere")


def test_a_dataset_of_rows_becomes_the_runs_training_rows(tmp_path):
    from relay.run.rows import task_rows

    rows = [{"prompt": f"{i}+1=", "ground_truth": str(i + 1)} for i in range(40)]
    trainer = RayPPOTrainer(small(ConfigStore(), tmp_path), dataset=rows)  # 16 samples = 4 prompts per step
    cfg = trainer._config({})
    train_rows, _ = task_rows(cfg.task, cfg.tools, cfg.run.seed)
    assert cfg.task.name == "custom" and [r["prompt"] for r in train_rows] == [r["prompt"] for r in rows]
    assert trainer._iters_per_epoch(cfg) == 10  # an epoch: one pass over the rows
    folder = Path(cfg.task.train_file).parent
    trainer.cleanup()
    assert not folder.exists()


# ------------------------------------------------------------------------------ configuration


def test_config_store_maps_the_field_aliases_onto_relays_keys():
    config = ConfigStore()
    config.model.model_name = "tiny"
    config.model.dtype = "bfloat16"
    config.inference.backend = "hf"
    config.inference.max_tokens = 256
    config.inference.temperature = 0.7
    config.inference.top_p = 0.9
    config.training.learning_rate = 1e-5
    config.training.num_epochs = 10
    config.training.batch_size = 32
    config.training.clip_ratio = 0.2
    config.training.adv_estimator = "grpo"  # or "gae", etc.
    config.checkpoint.output_dir = "./checkpoints"
    config.checkpoint.save_interval = 5
    config.ray.use_ray = True
    config.ray.num_actors = 4
    config.environment.max_turns = 3
    cfg = config.build()
    assert (cfg.model.path, cfg.model.dtype, cfg.rollout.engine) == ("tiny", "bfloat16", "hf")
    assert (cfg.rollout.max_new_tokens, cfg.rollout.temperature, cfg.rollout.top_p) == (256, 0.7, 0.9)
    assert (cfg.training.lr, cfg.algorithm.clip_low, cfg.algorithm.clip_high) == (1e-5, 0.2, 0.2)
    assert cfg.training.prompts_per_step * cfg.rollout.n == 32
    assert (cfg.run.output_dir, cfg.resources.rollout.count, cfg.task.env_config) == (
        "./checkpoints",
        4,
        {"max_turns": 3},
    )
    assert config.training.learning_rate == config.training.lr == 1e-5  # one source of truth, two names
    assert config.checkpoint_every(iters_per_epoch=3) == 15
    config.training.adv_estimator = "gae"  # a value model comes with GAE
    assert config.build().critic.enabled
    config.model.tensor_parallel_size = 2
    with pytest.raises(ConfigError, match="model.tensor_parallel_size=2: the hf engine has no tensor parallelism"):
        config.build()
    config.inference.backend = "vllm"
    if importlib.util.find_spec("vllm") is None:  # where it is not installed, the engine's own line says so
        with pytest.raises(ConfigError, match="rollout.engine: "):
            config.build()
    else:
        assert config.build().rollout.engine_kwargs["tensor_parallel_size"] == 2


def test_the_default_store_is_the_default_runs_config():
    from relay.config import load_config

    assert ConfigStore().build() == load_config(Path(__file__).resolve().parents[2] / "configs" / "default.yaml")


def test_relays_own_keys_and_files_are_reachable():
    config = ConfigStore("ppo")  # a shipped config by name
    assert config.algorithm.estimator == "gae" and config.critic.enabled
    config.training.steps = 7
    config.set("resources.rollout.count", 2)
    config.resources.learner.cpus = 0.5
    cfg = config.build()
    assert (cfg.training.steps, cfg.resources.rollout.count, cfg.resources.learner.cpus) == (7, 2, 0.5)
    with pytest.raises(AttributeError, match="unknown key"):
        _ = config.training.no_such_key


def test_environment_and_trajectory_snippets():
    config = ConfigStore()
    env = TextGameEnv(config.environment)
    obs = env.reset()
    obs, reward, done, info = env.step("test action")
    assert (obs, reward, done, info) == ("Score: -0.1, Inventory: []", -0.1, False, {})
    assert BaseEnvironment(EnvironmentConfig(max_turns=2)).get_prompt_prefix() == ""
    trajectory = Trajectory()
    trajectory.states = ["state1", "state2"]
    trajectory.actions = ["action1", "action2"]
    trajectory.rewards = [1.0, 0.5]
    trajectory.dones = [False, True]
    assert trajectory.summary()["return"] == 1.5
    assert RolloutData([trajectory, Trajectory(rewards=[2.0])]).returns == [1.5, 2.0]


# ------------------------------------------------------------------------------ algo


def test_algo_snippets_are_relays_math():
    rewards = torch.zeros(4, 3)
    rewards[:, -1] = torch.tensor([1.0, 0.0, 1.0, 1.0])
    mask = torch.ones(4, 3)
    values = torch.full((4, 3), 0.5)
    advantages, returns = algo.compute_gae_advantage_return(
        token_level_rewards=rewards, values=values, response_mask=mask, gamma=0.99, lam=0.95
    )
    # last token of row 0: delta = 1 - 0.5 = 0.5; the one before: delta = 0.99 * 0.5 - 0.5, plus 0.99 * 0.95 * 0.5
    assert advantages.shape == returns.shape == (4, 3)
    assert advantages[0, 2].item() == pytest.approx(0.5)
    assert advantages[0, 1].item() == pytest.approx(0.99 * 0.5 - 0.5 + 0.99 * 0.95 * 0.5)
    assert torch.allclose(returns, advantages + values)
    advantages, returns = algo.compute_grpo_advantage(
        token_level_rewards=rewards, response_mask=mask, index=np.array(["a", "a", "b", "b"])
    )
    # group a: rewards 1 and 0 (mean 0.5, std 0.707); group b: all equal, so 0
    assert advantages[:, 0].tolist() == pytest.approx([0.5 / 0.5**0.5, -0.5 / 0.5**0.5, 0.0, 0.0], abs=1e-5)
    same, _ = compute_advantages("grpo", rewards=rewards.sum(-1), loss_mask=mask, group_ids=torch.tensor([0, 0, 1, 1]))
    assert torch.equal(advantages, same)
    old_lp, new_lp = torch.zeros(4, 3), torch.full((4, 3), 0.5)  # ratio e^0.5 = 1.65: clipped at 1.2
    policy_loss, metrics = algo.compute_policy_loss(
        old_log_probs=old_lp, log_probs=new_lp, advantages=advantages, response_mask=mask, clip_ratio=0.2
    )
    assert metrics["pg_clipfrac"] == pytest.approx(0.25)  # only row 0 (A > 0) is clipped
    expected = (-advantages[0, 0] * 1.2 - advantages[1, 0] * np.exp(0.5)) * 3 / 12
    assert policy_loss.item() == pytest.approx(expected.item(), rel=1e-5)
    value_loss, metrics = algo.compute_value_loss(
        vpreds=values + 0.3, returns=returns, old_values=values, response_mask=mask, cliprange_value=0.2
    )
    assert value_loss.ndim == 0 and "vf_clipfrac" in metrics
    penalized_rewards, kl_value = algo.apply_kl_penalty(
        token_level_rewards=rewards, log_probs=new_lp, ref_log_probs=old_lp, response_mask=mask, kl_coef=0.01
    )
    assert kl_value == pytest.approx(0.5) and torch.allclose(penalized_rewards, rewards - 0.005)
    kl_ctrl = algo.KLController(init_kl_coef=0.01, target_kl=0.01, adaptive=True)
    kl_ctrl.update(current_kl=0.015, n_steps=1024)
    assert kl_ctrl.value == pytest.approx(0.01 * (1 + 0.2 * 1024 / 10_000))
