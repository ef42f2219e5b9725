"""Sharded checkpoints inside relay.checkpoint.atomic's atomic save (relay/checkpoint/dcp.py)."""

import signal
import subprocess
import sys
import textwrap

import torch

from relay.checkpoint.atomic import latest_checkpoint, load_checkpoint, save_checkpoint
from relay.checkpoint.dcp import load_shards, save_shards

# One process writes step 1 (two roles' shards), then dies by SIGKILL during step 2 after the first
# role's shards and before the second's: between shard writes, before any manifest.
KILLED_SAVE = textwrap.dedent(
    """
    import os, signal, sys, torch
    from relay.checkpoint.atomic import save_checkpoint
    from relay.checkpoint.dcp import save_shards

    root = sys.argv[1]
    torch.manual_seed(0)
    roles = {name: torch.nn.Linear(4, 3) for name in ("learner", "critic")}
    optimizers = {name: torch.optim.AdamW(m.parameters()) for name, m in roles.items()}

    def write(folder, die_after=None):
        for name, model in roles.items():
            save_shards(folder / name, model, optimizers[name], {"role": name})
            if name == die_after:
                os.kill(os.getpid(), signal.SIGKILL)

    save_checkpoint(root, 1, {}, {"step": 1}, write_shards=write)
    torch.save({n: m.state_dict() for n, m in roles.items()}, os.path.join(root, "step1-weights.pt"))
    with torch.no_grad():
        for m in roles.values():
            m.weight.add_(1.0)
    save_checkpoint(root, 2, {}, {"step": 2}, write_shards=lambda folder: write(folder, die_after="learner"))
    """
)


def test_a_kill_between_shard_writes_leaves_the_previous_checkpoint_latest(tmp_path):
    done = subprocess.run([sys.executable, "-c", KILLED_SAVE, str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == -signal.SIGKILL, done.stderr
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-step_00000002")]
    assert len(leftovers) == 1  # the half-written step 2, with the learner's shards in it
    assert (tmp_path / leftovers[0] / "learner" / ".metadata").is_file()
    assert latest_checkpoint(tmp_path) == tmp_path / "step_00000001"
    _, state = load_checkpoint(tmp_path / "step_00000001")  # verified against its manifest
    assert state == {"step": 1}
    saved = torch.load(tmp_path / "step1-weights.pt")
    for role in ("learner", "critic"):
        model = torch.nn.Linear(4, 3)
        extra = load_shards(tmp_path / "step_00000001" / role, model, torch.optim.AdamW(model.parameters()))
        assert extra == {"role": role}
        assert all(torch.equal(model.state_dict()[k], v) for k, v in saved[role].items())
    save_checkpoint(tmp_path, 2, {}, {"step": 2})  # the next save clears the leftover
    assert not any(p.name.startswith(".tmp-") for p in tmp_path.iterdir())


def test_shards_are_in_the_manifest_and_a_changed_shard_is_named(tmp_path):
    from relay.checkpoint.manifest import CheckpointCorruptError, verify_checkpoint

    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    path = save_checkpoint(
        tmp_path, 3, {}, {"step": 3}, write_shards=lambda f: save_shards(f / "learner", model, optimizer, {})
    )
    files = verify_checkpoint(path)["files"]
    assert "learner/.metadata" in files and "learner/rank_0.json" in files
    shard = next(name for name in files if name.endswith(".distcp"))
    data = bytearray((path / shard).read_bytes())
    data[0] ^= 0xFF
    (path / shard).write_bytes(bytes(data))
    try:
        load_checkpoint(path)
    except CheckpointCorruptError as e:
        assert shard in str(e)
    else:
        raise AssertionError("a changed shard went unnoticed")


def test_manifest_entries_may_name_one_role_folder_and_dcp_metadata_only():
    from relay.checkpoint.manifest import entry_name_problem

    for name in ("learner/.metadata", "learner/__0_0.distcp", "critic/rank_1.json", "policy.safetensors"):
        assert entry_name_problem(name) is None, name
    for name in ("a/b/c", "../x", "learner/../x", ".hidden/x", "learner/.other", "/abs/x", "learner\\x", "learner/"):
        assert entry_name_problem(name) is not None, name
