"""rollout.partial end to end (training.mode=async, default task, tiny model): weights that reach a
rollout worker mid-call are loaded between two one-token chunks; the run trains, records samples
whose tokens came from two versions, and every trained token is within max_staleness."""

import importlib.util
import json
from pathlib import Path

import pytest

from relay.config import load_config
from relay_trainer import loop
from relay_trainer.producer import RolloutProducer

REPO = Path(__file__).resolve().parents[2]


NO_VLLM = importlib.util.find_spec("vllm") is None


@pytest.mark.slow  # a whole run: about 50 s on 2 busy cores, most of it starting the actors
@pytest.mark.parametrize("engine", ["hf", pytest.param("vllm", marks=pytest.mark.skipif(NO_VLLM, reason="no vllm"))])
def test_async_partial_rollouts_train_mixed_samples_within_max_staleness(tmp_path, ray_session, monkeypatch, engine):
    trained, take = [], RolloutProducer.take

    def spy(self):
        samples, metrics = take(self)
        trained.append((self.buffer.next_step - 1, samples))
        return samples, metrics

    monkeypatch.setattr(RolloutProducer, "take", spy)
    overrides = [
        f"run.output_dir={tmp_path}",
        "run.name=partial",
        "logging.console=false",
        "checkpoint.save_hf_model=false",
        "training.eval_before=false",
        "task.num_eval_rows=4",
        "training.steps=6",
        "training.prompts_per_step=4",
        "rollout.n=4",
        "training.mode=async",
        "training.max_staleness=1",
        # small calls, one group at a time, a pause after every token: calls are in progress when
        # the learner's weights arrive
        "training.groups_per_call=2",
        "rollout.max_live_episodes=4",
        "rollout.partial=true",
        "rollout.partial_chunk=1",
        "algorithm.tis_cap=2.0",
        f"rollout.engine={engine}",
    ]
    loop.train(load_config(REPO / "configs/default.yaml", overrides))
    assert [step for step, _ in trained] == list(range(6))
    for step, samples in trained:
        for s in samples:
            assert len(s.token_versions) == len(s.response_ids)
            assert s.weight_version == min(s.token_versions)
            assert all(0 <= step - v <= 1 for v in s.token_versions), (step, s.token_versions)  # every token
    mixed = sum(len(set(s.token_versions)) > 1 for _, samples in trained for s in samples)
    assert mixed > 0, "no call was in progress when new weights arrived"
    rows = [json.loads(line) for line in (tmp_path / "partial" / "metrics.jsonl").read_text().splitlines()]
    logged = sum(r["weights/mixed_samples"] for r in rows if "weights/mixed_samples" in r)
    assert logged == mixed
