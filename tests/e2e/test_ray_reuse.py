"""Two runs in one process that need Rays of different sizes (a notebook fitting twice, a script or
benchmark training two configs): the local Ray relay started for the first is stopped and started
again at the second's size; a Ray the caller started is never stopped, only refused in one line."""

import os
from pathlib import Path

import pytest
import ray

from relay.config import ConfigError, load_config
from relay_trainer import loop
from relay_trainer.local_ray import any_agent_port, loopback_node
from relay_trainer.pools import actor_roles

REPO = Path(__file__).resolve().parents[2]


def tiny_run(tmp_path, name: str, cpus: float):
    """A 1-step run whose roles need `cpus` logical CPUs in all: the environment pool (a reward
    actor) takes what the other roles leave."""
    tiny = ["training.steps=1", "training.prompts_per_step=2", "rollout.n=2", "task.num_eval_rows=2"]
    quiet = ["training.eval_before=false", "checkpoint.every=0", "checkpoint.save_hf_model=false"]
    keys = [*tiny, *quiet, "logging.console=false", f"run.output_dir={tmp_path}", f"run.name={name}"]
    cfg = load_config(REPO / "configs/default.yaml", [*keys, "task.reward_actor=true"])
    others = sum(r.cpus * r.count for role, r in actor_roles(cfg).items() if role != "env")
    cfg = load_config(
        REPO / "configs/default.yaml", [*keys, "task.reward_actor=true", f"resources.env.cpus={cpus - others}"]
    )
    assert sum(r.cpus * r.count for r in actor_roles(cfg).values()) == cpus
    return cfg


@pytest.mark.slow
def test_a_second_run_needing_more_cpus_gets_a_ray_of_its_size_unless_the_caller_started_ray(tmp_path):
    assert not ray.is_initialized()  # relay starts the first run's Ray itself
    small, large = (os.cpu_count() or 1) + 1, (os.cpu_count() or 1) + 2  # above the cores: sized by the roles
    try:
        loop.train(tiny_run(tmp_path, "first", small))
        first_ray = ray.get_runtime_context().gcs_address
        assert ray.cluster_resources()["CPU"] == small

        summary = loop.train(tiny_run(tmp_path, "second", large))
        assert (Path(summary["run_dir"]) / "metrics.jsonl").read_text().count("\n") == 1
        assert ray.cluster_resources()["CPU"] == large
        assert ray.get_runtime_context().gcs_address != first_ray  # a new Ray, not a resized view

        ray.shutdown()  # now the caller's own Ray, too small: refused in one line, and left running
        with loopback_node(), any_agent_port():
            ray.init(address="local", num_cpus=small, include_dashboard=False, namespace="relay")
        users_ray = ray.get_runtime_context().gcs_address
        with pytest.raises(ConfigError) as refused:
            loop.train(tiny_run(tmp_path, "third", large))
        assert len(refused.value.problems) == 1
        assert f"the roles need {large:g} CPU in all" in refused.value.problems[0]
        assert f"the Ray cluster has {small:g}" in refused.value.problems[0]
        assert ray.is_initialized() and ray.get_runtime_context().gcs_address == users_ray
    finally:
        ray.shutdown()
