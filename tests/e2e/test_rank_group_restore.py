"""A rank of an FSDP2 learner group lost inside its update: killed (SIGKILL of its own process), or
hung (SIGSTOP) until its deadline kills every rank. The ranks are restarted, the group formed again
and restored in place (relay_trainer/learner_recovery.py). The run completes every step, each step's
reward equals an undisturbed run's with the same seed, and the final checkpoint's shards hold the
same weights.

Rank 1 is lost in step 2's update, before any checkpoint (restored from the run's start, step 1's
update replayed), and in step 4's (restored from the step-2 checkpoint's shards, step 3's update
replayed). 2-rank runs: the slow tier.
"""

from __future__ import annotations

import json
import signal

import pytest
import ray
import torch
import torch.distributed.checkpoint as dcp

import driver
from relay.checkpoint.atomic import latest_checkpoint
from relay_trainer import loop
from tests.e2e.test_learner_restore import argv, kill_in_loss

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ray_session")]
STEPS, EVERY, LOST_AFTER = 4, 2, (1, 3)


def run(tmp_path, name: str, sig: int | None = None) -> list[dict]:
    reported, original = [], loop.train

    def after(step, metrics):
        reported.append(metrics)
        if sig is not None and step in LOST_AFTER:
            ray.get(ray.get_actor(f"{name}/learner-1", namespace="relay").__ray_call__.remote(kill_in_loss(sig)))

    # a hung rank is found after update_timeout_s; a healthy update takes a few seconds
    extra = ("resources.learner.count=2", "resources.update_timeout_s=30")
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(loop, "train", lambda cfg, resume: original(cfg, resume, report=after))
        assert driver.main(argv(tmp_path, name, EVERY, extra)) == 0
    return reported


def final_weights(run_dir) -> dict[str, torch.Tensor]:
    """The last checkpoint's learner shards, read whole (no process group: one reader)."""
    folder = latest_checkpoint(run_dir / "checkpoints") / "learner"
    metadata = dcp.FileSystemReader(str(folder)).read_metadata()
    names = [k for k in metadata.state_dict_metadata if k.startswith("model.")]
    state = {k: torch.empty(metadata.state_dict_metadata[k].size) for k in names}
    dcp.load(state, checkpoint_id=str(folder), no_dist=True)
    return state


@pytest.fixture(scope="module")
def undisturbed(tmp_path_factory):
    path = tmp_path_factory.mktemp("undisturbed")
    return run(path, "undisturbed"), final_weights(path / "undisturbed")


@pytest.mark.parametrize(
    "sig, why",
    [(signal.SIGKILL, "a rank died"), (signal.SIGSTOP, "no answer within its deadline")],
    ids=["killed", "hung"],
)
def test_a_lost_learner_rank_restores_the_whole_group_in_place(undisturbed, tmp_path, capsys, sig, why):
    expected, expected_weights = undisturbed
    reported = run(tmp_path, "restore", sig)
    assert [m["reward/mean"] for m in reported] == [m["reward/mean"] for m in expected]
    assert [m["faults/learner_restores"] for m in reported] == [0.0, 1.0, 0.0, 1.0]
    logged = [json.loads(line)["step"] for line in (tmp_path / "restore" / "metrics.jsonl").read_text().splitlines()]
    assert logged == list(range(1, STEPS + 1))  # no step redone
    out = capsys.readouterr().out
    for base in ("the run's start + 1", "step_00000002 + 1"):
        assert f"restore/learner rank group (2 ranks) update: {why}; restored from {base} replayed updates in " in out
    assert "the run stopped" not in out
    weights = final_weights(tmp_path / "restore")
    assert weights.keys() == expected_weights.keys() and weights
    worst = max((weights[k].double() - v.double()).abs().max().item() for k, v in expected_weights.items())
    assert worst <= 1e-6, worst
