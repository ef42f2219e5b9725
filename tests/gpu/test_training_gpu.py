"""The default task trained with every role on one GPU: HF engine, and vLLM colocated with the
learner (the engine sleeps after each rollout and wakes for the weight update)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import ray
import torch

from relay.config import load_config
from relay_trainer import loop

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]
ON_ONE_GPU = ["resources.rollout.gpus=0.5", "resources.learner.gpus=0.3", "resources.reference.gpus=0.2"]


@pytest.fixture(scope="module", autouse=True)
def ray_local():
    ray.init(
        num_cpus=8,
        num_gpus=torch.cuda.device_count(),
        include_dashboard=False,
        namespace="relay-test-gpu-train",
        log_to_driver=False,
    )
    yield
    ray.shutdown()


def train(tmp_path, overrides):
    cfg = load_config(
        REPO / "configs/default.yaml",
        [
            f"run.output_dir={tmp_path}",
            "logging.console=false",
            "checkpoint.save_hf_model=false",
            "checkpoint.every=0",
            *ON_ONE_GPU,
            *overrides,
        ],
    )
    summary = loop.train(cfg)
    steps = [json.loads(line) for line in (Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    return summary, steps


def test_default_task_trains_on_the_gpu(tmp_path):
    summary, steps = train(tmp_path, [])
    print("gpu hf", summary, "median step s", sorted(s["time/step_s"] for s in steps)[len(steps) // 2])
    assert summary["accuracy_after"] >= summary["accuracy_before"] + 0.1
    assert steps[0]["rollout/logprob_diff_max"] < 1e-3


def test_vllm_colocated_with_sleep_trains(tmp_path):
    pytest.importorskip("vllm")
    summary, steps = train(tmp_path, ["rollout.engine=vllm", 'rollout.engine_kwargs={"gpu_memory_utilization": 0.3}'])
    print(
        "gpu vllm colocated",
        summary,
        "median step s",
        sorted(s["time/step_s"] for s in steps)[len(steps) // 2],
        "median sync s",
        sorted(s["time/sync_s"] for s in steps)[len(steps) // 2],
    )
    assert summary["accuracy_after"] >= summary["accuracy_before"] + 0.05
    assert max(s["rollout/logprob_diff_max"] for s in steps) < 1e-2  # every step's engine ran the synced weights
