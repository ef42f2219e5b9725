"""A learner rank group (FSDP2, two gloo ranks in plain processes) finds old logprobs inside
`update` like the driver's separate call: the no-grad pass (two mini-batches) gives the same
update exactly, the on-policy shortcut (one mini-batch) to float error."""

from __future__ import annotations

import pytest
import torch
import torch.multiprocessing as mp

from relay.config.role_settings import PolicySettings
from tests.fsdp_ranks import _on_every_rank, free_port, step_batch

MODES = {"no-grad pass": ["training.mini_batches=2"], "on-policy": []}


def _rank_main(rank: int, ports: dict, model_path: str, out: str) -> None:
    import torch.distributed as dist

    from actors.learner import Learner
    from relay.config import load_config

    torch.set_num_threads(1)
    results = {}
    for (mode, overrides), before in ((m, b) for m in MODES.items() for b in (True, False)):
        learner = Learner(
            PolicySettings.of(load_config(None, ["training.micro_batch_size=2", *overrides])), model_path, num_threads=1
        )
        learner.join_rank_group("127.0.0.1", ports[mode, before], rank, 2, "gloo")
        batch = step_batch(1)
        if before:  # the driver's separate call, as today
            batch.old_logprobs = _on_every_rank(learner.compute_logprobs(batch))
        metrics = learner.update(batch)
        metrics.pop("time/learner_update_s")
        results[mode, before] = metrics
        dist.destroy_process_group()
    if rank == 0:
        torch.save(results, out)


@pytest.mark.slow  # two processes starting torch and building four rank groups: about a minute on 2 loaded cores
def test_a_rank_group_finds_old_logprobs_inside_update(tiny_model_path, tmp_path):
    ports = {(mode, before): free_port() for mode in MODES for before in (True, False)}
    out = tmp_path / "results.pt"
    mp.start_processes(_rank_main, args=(ports, tiny_model_path, str(out)), nprocs=2, start_method="spawn")
    results = torch.load(out)
    assert results["no-grad pass", False] == results["no-grad pass", True]
    inside, before = results["on-policy", False], results["on-policy", True]
    assert inside.keys() == before.keys()
    for key, value in before.items():
        assert inside[key] == pytest.approx(value, rel=1e-5, abs=1e-7), key
    assert inside["actor/optimizer_steps"] == 1.0 and "rollout/logprob_diff_max" in inside
