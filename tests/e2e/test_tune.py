"""Ray Tune sweeps: the sweep file is checked before Ray starts, and a two-trial grid over
training.lr (2 steps each, tiny batch, CPU) finishes and names the better trial.

Each trial's actors go into the trial's own placement group (tune.trial_bundles), never
into placement groups of their own: the test checks that none was made.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import ray
import yaml

from relay.config import ConfigError
from relay_trainer import tune

REPO = Path(__file__).resolve().parents[2]


def test_shipped_sweep_file_is_valid():
    sweep = tune.load_sweep(REPO / "configs" / "tune.yaml")
    assert sweep.metric == "reward/mean" and sweep.scheduler["type"] == "asha"
    assert set(tune.param_space(sweep)) == set(sweep.search)
    # One bundle for the trial's own process, then one per actor: the colocated learner and rollout
    # worker (the plain reward function runs inside it, so there is no EnvPool).
    assert tune.trial_bundles(sweep.base_config) == [{"CPU": tune.TRIAL_DRIVER_CPUS}, {"CPU": 1.0}]
    with_reference = sweep.trial_config(
        {"algorithm.kl_coef": 0.01, "resources.rollout.count": 2, "training.prompts_per_step": 4}
    )
    assert len(tune.trial_bundles(with_reference)) == 5  # + a second rollout worker + the reference


def test_sweep_file_problems_are_listed_together(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "base": {"training": {"steps": 2}},
                "search": {
                    "training.lrr": {"grid": [1e-4]},
                    "algorithm.clip_high": {"uniform": [0.3, 0.2]},
                    "training.lr": {"best": 1},
                },
                "mode": "maximize",
                "scheduler": {"type": "asha", "max_t": 2, "grace_period": 5},
            }
        )
    )
    with pytest.raises(ConfigError) as e:
        tune.load_sweep(path)
    text = "\n".join(e.value.problems)
    for fragment in ("training.lrr: unknown key", "clip_high.uniform", "search.training.lr", "mode", "grace_period"):
        assert fragment in text


def test_two_trial_sweep_reports_the_better_trial(ray_session, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RAY_CHDIR_TO_TRIAL_DIR", "0")  # what run_sweep sets; kept out of later tests
    sweep_file = tmp_path / "sweep.yaml"
    sweep_file.write_text(
        yaml.safe_dump(
            {
                "base": str(REPO / "configs" / "default.yaml"),
                "overrides": [
                    "training.steps=2",
                    "training.prompts_per_step=4",
                    "rollout.n=4",
                    "task.num_eval_rows=8",
                    "checkpoint.save_hf_model=false",
                ],
                "search": {"training.lr": {"grid": [1.0e-5, 3.0e-3]}},
                "metric": "reward/mean",
                "mode": "max",
                "scheduler": {"type": "asha", "max_t": 2, "grace_period": 1},
                "name": "two-trials",
                "output_dir": str(tmp_path / "tune"),
            }
        )
    )
    earlier_groups = set(ray.util.placement_group_table())  # the shared Ray's, from other files' runs
    assert tune.main([str(sweep_file)]) == 0

    sweep_dir = tmp_path / "tune" / "two-trials"
    last = {}  # lr -> the trial's last reward/mean, from Tune's own result files
    for trial_dir in sorted(p for p in sweep_dir.iterdir() if (p / "params.json").exists()):
        lr = json.loads((trial_dir / "params.json").read_text())["training.lr"]
        results = [json.loads(line) for line in (trial_dir / "result.json").read_text().splitlines() if line.strip()]
        last[lr] = results[-1]["reward/mean"]
        # The relay run of the trial lives in the trial folder, named by the trial id.
        (run_dir,) = [p for p in trial_dir.iterdir() if (p / "metrics.jsonl").exists()]
        assert run_dir.name == results[-1]["trial_id"]
        assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == len(results)
    assert set(last) == {1.0e-5, 3.0e-3}

    best = yaml.safe_load((sweep_dir / "best_config.yaml").read_text())
    assert last[best["training"]["lr"]] == max(last.values())
    assert best["training"]["steps"] == 2 and best["rollout"]["n"] == 4  # the full resolved config
    out = capsys.readouterr().out
    assert "best trial: training.lr=" in out and "two-trials" in out

    # create_group used the trials' placement groups: it made no group of its own.
    names = [pg["name"] for pg_id, pg in ray.util.placement_group_table().items() if pg_id not in earlier_groups]
    assert names, "the trials' placement groups are in the table"
    assert not [n for n in names if n.endswith(("/rollout", "/learner", "/env"))], names
