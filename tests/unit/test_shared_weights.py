"""Same-node weight sync through shared memory (relay/weights/shared_memory.py): a worker's mapping of
the learner's buffers loads every dtype bit for bit, tied names included; a buffer overwritten
while a worker reads it fails loudly; nothing is left in the folder; no room means None."""

import os
from collections import namedtuple

import pytest
import torch

from relay.weights.shared_memory import SharedWeights


def state_dict(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    sd = {
        "embed.weight": torch.randn(11, 4, generator=g),
        "norm.weight": torch.randn(5, generator=g).to(torch.bfloat16),
        "steps": torch.randint(0, 100, (3,), generator=g),
    }
    sd["lm_head.weight"] = sd["embed.weight"]  # tied: one storage, two names
    return sd


def test_a_worker_mapping_reads_what_the_learner_wrote(tmp_path):
    learner = SharedWeights.create(state_dict(0), tag="run/1", folder=str(tmp_path))
    worker = SharedWeights.attach(learner.handle)
    learner.unlink()
    assert list(tmp_path.iterdir()) == []  # the mappings keep the memory, the names are gone
    for version in (1, 2, 3):
        sent = state_dict(version)
        learner.write(sent, version)
        got = worker.read(version)
        assert got.keys() == sent.keys()
        assert all(got[k].dtype == t.dtype and torch.equal(got[k], t) for k, t in sent.items())
        assert got["lm_head.weight"].data_ptr() == got["embed.weight"].data_ptr()
        worker.check(version)


def test_a_buffer_overwritten_during_a_load_fails_loudly(tmp_path):
    learner = SharedWeights.create(state_dict(0), tag="t", folder=str(tmp_path))
    worker = SharedWeights.attach(learner.handle)
    learner.unlink()
    learner.write(state_dict(1), 1)
    worker.read(1)
    learner.write(state_dict(3), 3)  # two versions on: the same buffer as version 1
    with pytest.raises(RuntimeError, match="buffer for version 1 holds version 3"):
        worker.check(1)
    with pytest.raises(RuntimeError, match="holds version -1"):
        worker.read(2)  # never written


def test_the_files_are_private_and_no_room_means_none(tmp_path, monkeypatch):
    shared = SharedWeights.create(state_dict(0), tag="t", folder=str(tmp_path))
    assert all(os.stat(p).st_mode & 0o777 == 0o600 for p in shared.handle.paths)
    shared.unlink()
    assert SharedWeights.create(state_dict(0), tag="t", folder=str(tmp_path / "missing")) is None
    Stats = namedtuple("Stats", "f_bavail f_frsize")
    monkeypatch.setattr(os, "statvfs", lambda _: Stats(f_bavail=16, f_frsize=4096))  # 64 kB free
    assert SharedWeights.create(state_dict(0), tag="t", folder=str(tmp_path)) is None
