"""Bad input gets one clear line on stderr and exit code 2, never a traceback, and leaves no run
folder behind. Every case here fails before Ray starts, so each is a plain
`driver.main([...])` call."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import driver
from relay.config import ConfigError, load_config
from relay.run.folder import create_run_folder, remove_if_unstarted, run_folder

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "relay/models/shipped/tiny"


def fails(capsys, tmp_path, *argv) -> str:
    """driver.main(argv) exits 2 with exactly one line on stderr, and no run folder was made."""
    out = tmp_path / "runs"
    code = driver.main([*argv, f"run.output_dir={out}"])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("relay: error: "), err
    assert "Traceback" not in err
    assert not out.exists() or not any(out.iterdir()), list(out.iterdir())
    return lines[0]


def test_empty_missing_and_broken_config_files(capsys, tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing here\n")
    assert f"{empty}: the config file is empty" in fails(capsys, tmp_path, "--config", str(empty))
    assert f"config file not found: {tmp_path / 'nope.yaml'}" in fails(
        capsys, tmp_path, "--config", str(tmp_path / "nope.yaml")
    )
    broken = tmp_path / "broken.yaml"
    broken.write_text("training:\n  steps: 3\n  lr: [1e-4\nrollout:\n  n: 2\n")
    line = fails(capsys, tmp_path, "--config", str(broken))
    assert f"{broken}:4: YAML syntax error" in line, line  # 1-based: the line where the list breaks


def test_rows_file_errors_name_the_file_and_line(capsys, tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"prompt": "1+1", "ground_truth": "2"}\n\n{"prompt": "2+2", "ground_truth": "4"\n')
    custom = ["task.name=custom", f"task.train_file={rows}"]
    assert f"{rows}:3: not valid JSON" in fails(capsys, tmp_path, *custom)
    rows.write_text('{"prompt": "1+1", "ground_truth": "2"}\n{"prompt": "2+2", "answer": "4"}\n')
    line = fails(capsys, tmp_path, *custom)
    assert f"{rows}:2: row has no 'ground_truth' (task.answer_key)" in line
    line = fails(capsys, tmp_path, *custom, "task.answer_key=answer")
    assert f"{rows}:1: row has no 'answer' (task.answer_key)" in line


def test_model_folder_without_tokenizer_or_weights(capsys, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    shutil.copy(TINY / "config.json", folder)
    shutil.copy(TINY / "model.safetensors", folder)
    line = fails(capsys, tmp_path, f"model.path={folder}")
    assert line.startswith(f"relay: error: model.path: the folder {folder} is missing a tokenizer"), line
    (folder / "model.safetensors").unlink()
    shutil.copy(TINY / "tokenizer.json", folder)
    line = fails(capsys, tmp_path, f"model.path={folder}")
    assert f"model.path: the folder {folder} is missing model weights" in line, line
    line = fails(capsys, tmp_path, f"model.tokenizer_path={tmp_path}")  # the shipped model, another tokenizer
    assert f"model.tokenizer_path: the folder {tmp_path} is missing a tokenizer" in line, line


def test_hub_name_offline_names_the_key(capsys, tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # what HF_HUB_OFFLINE=1 sets
    line = fails(capsys, tmp_path, "model.path=relay-tests/no-such-model")
    assert "model.path: relay-tests/no-such-model: not a local folder, and offline" in line, line


def test_run_name_and_output_dir(capsys, tmp_path):
    for name in ("a/b", "..", "../up", "."):
        assert "run.name: must be one folder name" in fails(capsys, tmp_path, f"run.name={name}")
    blocker = tmp_path / "file"
    blocker.write_text("")
    code = driver.main([f"run.output_dir={blocker}/runs"])
    err = capsys.readouterr().err.strip()
    assert (
        code == 2
        and err == f"relay: error: run.output_dir: {blocker} is a file, not a folder (output_dir is {blocker}/runs)"
    )


def test_resume_of_a_missing_run_and_overrides_around_resume(capsys, tmp_path):
    # The overrides before and after --resume both apply: the message names the run they make.
    line = fails(capsys, tmp_path, "run.name=gone", "--resume", "training.steps=3")
    assert f"--resume: there is no run {tmp_path / 'runs' / 'gone'} to resume" in line, line
    line = fails(capsys, tmp_path, "--resume", "run.name=gone")
    assert "there is no run" in line


def test_a_run_folder_left_before_the_first_step_is_reused(tmp_path):
    cfg = load_config(None, [f"run.output_dir={tmp_path}", "run.name=r"])
    first = run_folder(cfg.run, resume=False)
    assert not first.exists()  # a path only: made once the run starts
    create_run_folder(cfg, first)
    (first / "metrics.jsonl").touch()  # the loggers open their files before the first step
    assert run_folder(cfg.run, resume=False) == first  # nothing of a run in it: no `r-1`
    (first / "metrics.jsonl").write_text(json.dumps({"step": 1}) + "\n")
    assert run_folder(cfg.run, resume=False) == tmp_path / "r-1"
    assert run_folder(cfg.run, resume=True) == first
    remove_if_unstarted(first)  # at exit: a folder with a run's results stays
    assert first.exists()
    (first / "metrics.jsonl").write_text("")
    remove_if_unstarted(first)  # one the run never wrote to goes
    assert not first.exists()


def test_unwritable_output_dir_at_creation_is_one_line(tmp_path):
    cfg = load_config(None, [f"run.output_dir={tmp_path}"])
    (tmp_path / "x").write_text("")
    with pytest.raises(ConfigError, match=r"run.output_dir: cannot create .*x/y"):
        create_run_folder(cfg, tmp_path / "x" / "y")


def test_logging_keys_are_checked():
    with pytest.raises(ConfigError) as e:
        load_config(None, ["logging.console_every=0", "logging.samples_every=-1", "logging.samples_per_write=0"])
    assert [p.split(":")[0] for p in e.value.problems] == [
        "logging.console_every",
        "logging.samples_every",
        "logging.samples_per_write",
    ]
