"""A rank of an FSDP2 learner group killed inside its update (SIGKILL of its own process): every
rank is restarted, the group formed again and restored in place (actors/learner_recovery.py). The
run completes every step, each step's reward equals an undisturbed run's with the same seed, and
the final checkpoint's shards hold the same weights.

Rank 1 is killed in step 2's update, before any checkpoint (restored from the run's start, step 1's
update replayed), and in step 4's (restored from the step-2 checkpoint's shards, step 3's update
replayed). Two 2-rank runs: the slow tier.
"""

from __future__ import annotations

import json

import pytest
import ray
import torch
import torch.distributed.checkpoint as dcp

import driver
from relay.checkpoint.atomic import latest_checkpoint
from tests.e2e.test_learner_restore import KEYS, kill_in_loss

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ray_session")]
STEPS, EVERY, KILLED_AFTER = 4, 2, (1, 3)


def run(tmp_path, name: str, kill: bool) -> list[dict]:
    reported, original = [], driver.train

    def after(step, metrics):
        reported.append(metrics)
        if kill and step in KILLED_AFTER:
            ray.get(ray.get_actor(f"{name}/learner-1", namespace="relay").__ray_call__.remote(kill_in_loss()))

    argv = [
        f"run.output_dir={tmp_path}",
        f"run.name={name}",
        f"training.steps={STEPS}",
        "training.prompts_per_step=4",
        "rollout.n=4",
        "task.num_eval_rows=4",
        "training.eval_before=false",
        f"checkpoint.every={EVERY}",
        "checkpoint.save_hf_model=false",
        "logging.console=false",
        "resources.learner.count=2",
        "resources.update_timeout_s=120",
    ]
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(driver, "train", lambda cfg, resume: original(cfg, resume, report=after))
        assert driver.main(argv) == 0
    return reported


def final_weights(run_dir) -> dict[str, torch.Tensor]:
    """The last checkpoint's learner shards, read whole (no process group: one reader)."""
    folder = latest_checkpoint(run_dir / "checkpoints") / "learner"
    metadata = dcp.FileSystemReader(str(folder)).read_metadata()
    names = [k for k in metadata.state_dict_metadata if k.startswith("model.")]
    state = {k: torch.empty(metadata.state_dict_metadata[k].size) for k in names}
    dcp.load(state, checkpoint_id=str(folder), no_dist=True)
    return state


def test_a_killed_learner_rank_restores_the_whole_group_in_place(tmp_path, capsys):
    expected = run(tmp_path, "undisturbed", kill=False)
    reported = run(tmp_path, "restore", kill=True)
    assert len(reported) == STEPS
    assert [m["reward/mean"] for m in reported] == [m["reward/mean"] for m in expected]
    assert [m["faults/learner_restores"] for m in reported] == [0.0, 1.0, 0.0, 1.0]
    assert {k: sum(m[k] for m in reported) for k in KEYS}["faults/learner_restores"] == 2.0
    logged = [json.loads(line)["step"] for line in (tmp_path / "restore" / "metrics.jsonl").read_text().splitlines()]
    assert logged == list(range(1, STEPS + 1))  # no step redone
    out = capsys.readouterr().out
    for base in ("the run's start + 1", "step_00000002 + 1"):
        assert f"restored from {base} replayed updates in " in out
    assert "the run stopped" not in out
    weights, undisturbed = final_weights(tmp_path / "restore"), final_weights(tmp_path / "undisturbed")
    assert weights.keys() == undisturbed.keys() and weights
    worst = max((weights[k].double() - v.double()).abs().max().item() for k, v in undisturbed.items())
    assert worst <= 1e-6, worst
