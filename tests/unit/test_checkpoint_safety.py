"""Hostile or damaged checkpoint folders: forged manifests, crashes mid-prune, half-deleted
checkpoints, and what --resume does when the newest checkpoint fails verification."""

from __future__ import annotations

import json
import os

import pytest
import torch
from safetensors.torch import save_file

from relay.checkpoint import atomic as checkpoint
from relay.checkpoint.atomic import (
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
    sweep_leftovers,
)
from relay.checkpoint.manifest import CheckpointCorruptError, bare_name_problem, sha256_file
from relay.config.role_settings import PolicySettings
from relay.failures import RunFailed
from relay.run.resume import ResumeRefused, resume_checkpoint


def groups(value: float = 1.0) -> dict[str, dict[str, torch.Tensor]]:
    return {"policy": {"w": torch.full((2, 3), value)}, "optimizer": {"step": torch.tensor(value)}}


def save(root, step: int, **kwargs):
    return save_checkpoint(root, step, groups(float(step)), {"step": step}, **kwargs)


def rewrite_manifest(path, change) -> None:
    manifest_path = path / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    change(manifest)  # in place
    manifest_path.write_text(json.dumps(manifest))


def describe(file) -> dict:
    return {"size": file.stat().st_size, "sha256": sha256_file(file)}


def flip_last_byte(file) -> None:
    data = bytearray(file.read_bytes())
    data[-1] ^= 0xFF
    file.write_bytes(bytes(data))


# ---------------------------------------------------------------------------------------------
# Manifest names and entries


@pytest.mark.parametrize(
    "name, problem",
    [
        ("..", "contains '..'"),
        ("../policy", "contains '..'"),
        ("a/../../b", "contains '..'"),
        ("/etc/passwd", "absolute path"),
        ("\\share\\x", "absolute path"),
        ("sub/policy", "path separator"),
        ("sub\\policy", "path separator"),
        (".hidden", "hidden name"),
        ("", "empty name"),
        ("a\x00b", "NUL byte"),
        (3, "not a string"),
    ],
)
def test_bare_name_problems(name, problem):
    assert problem in bare_name_problem(name)


@pytest.mark.parametrize("name", ["policy", "policy.safetensors", "state.json", "a..b", "critic_optimizer"])
def test_bare_names_pass(name):
    assert bare_name_problem(name) is None


def forge_outside_group(tmp_path, path, name: str) -> None:
    """A manifest pointing a group at a valid safetensors file outside the checkpoint, with the
    right size and hash: only the name check stands between it and being loaded."""
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    evil = outside / "evil.safetensors"
    save_file({"w": torch.full((2, 3), 666.0)}, str(evil))
    listed = name + ".safetensors"

    def change(manifest):
        manifest["groups"] = [name if g == "policy" else g for g in manifest["groups"]]
        manifest["files"][listed] = describe(evil)
        del manifest["files"]["policy.safetensors"]

    rewrite_manifest(path, change)


@pytest.mark.parametrize(
    "make_name, problem",
    [
        (lambda tmp_path: "../../outside/evil", "contains '..'"),
        (lambda tmp_path: str(tmp_path / "outside" / "evil"), "absolute path"),
        (lambda tmp_path: "../outside", "contains '..'"),
    ],
)
def test_group_names_that_leave_the_folder_are_refused_before_reading(tmp_path, make_name, problem):
    path = save(tmp_path / "ckpt", 1)
    forge_outside_group(tmp_path, path, make_name(tmp_path))

    with pytest.raises(CheckpointCorruptError) as error:
        load_checkpoint(path)
    assert problem in str(error.value)
    assert str(path / "manifest.json") in str(error.value)


def drop(key, inner=None):
    def change(manifest):
        del (manifest[inner] if inner else manifest)[key]

    return change


@pytest.mark.parametrize(
    "change, problem",
    [
        (drop("state.json", "files"), "state.json: not listed"),
        (drop("policy.safetensors", "files"), "policy.safetensors: not listed"),
        (lambda m: m["files"]["state.json"].pop("sha256"), "state.json: sha256 None is not 64 lowercase hex"),
        (lambda m: m["files"]["state.json"].pop("size"), "state.json: size None is not an int"),
        (lambda m: m["files"]["state.json"].update(size="12"), "size '12' is not an int"),
        (lambda m: m["files"]["state.json"].update(size=True), "size True is not an int"),
        (lambda m: m["files"]["state.json"].update(size=-1), "size -1 is not an int >= 0"),
        (lambda m: m["files"]["state.json"].update(sha256="abc"), "sha256 'abc' is not 64"),
        (lambda m: m["files"].update({"state.json": "x"}), "state.json: entry is not an object"),
        (lambda m: m["files"].update({"../x": m["files"]["state.json"]}), "file name '../x' contains '..'"),
        (lambda m: m["files"].update({"/abs": m["files"]["state.json"]}), "file name '/abs' is an absolute path"),
        (lambda m: m.update(groups=["policy", "policy", "optimizer"]), "repeated"),
        (lambda m: m.update(groups="policy"), "groups 'policy' is not a list"),
        (lambda m: m.update(files=[]), "files is a list, not an object"),
        (drop("groups"), "groups None is not a list"),
        (lambda m: m.update(step=2), "step 2 does not match the folder name step_00000001"),
        (lambda m: m.update(step="1"), "step '1' is not an int"),
        (lambda m: m.update(format="other"), "expected 'relay-checkpoint'"),
        (lambda m: m.update(version=99), "version 99"),
    ],
)
def test_malformed_manifest_is_named(tmp_path, change, problem):
    path = save(tmp_path, 1)
    rewrite_manifest(path, change)
    with pytest.raises(CheckpointCorruptError) as error:
        load_checkpoint(path)
    message = str(error.value)
    assert problem in message
    assert all(line.startswith(str(path / "manifest.json")) for line in message.splitlines())


def test_a_manifest_that_is_not_an_object_is_named(tmp_path):
    path = save(tmp_path, 1)
    (path / "manifest.json").write_text("[1, 2]")
    with pytest.raises(CheckpointCorruptError, match="manifest.json: top level is a list, not an object"):
        load_checkpoint(path)
    (path / "manifest.json").write_text('{"files": ')
    with pytest.raises(CheckpointCorruptError, match="manifest.json: unreadable manifest"):
        load_checkpoint(path)


def test_a_symbolic_link_in_place_of_a_file_is_refused(tmp_path):
    path = save(tmp_path / "ckpt", 1)
    copy = tmp_path / "copy.safetensors"
    copy.write_bytes((path / "policy.safetensors").read_bytes())  # same size, same hash
    (path / "policy.safetensors").unlink()
    os.symlink(copy, path / "policy.safetensors")
    with pytest.raises(CheckpointCorruptError, match="policy.safetensors: a symbolic link"):
        load_checkpoint(path)


@pytest.mark.parametrize("name", ["..", "../x", "/abs", "a/b", ".hidden"])
def test_save_refuses_group_names_that_leave_the_folder(tmp_path, name):
    with pytest.raises(ValueError, match="bad checkpoint group name"):
        save_checkpoint(tmp_path, 1, {name: {"w": torch.ones(1)}}, {})
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------
# Pruning and leftovers


def test_a_crash_mid_prune_leaves_no_partial_checkpoint_and_is_swept(tmp_path, monkeypatch):
    save(tmp_path, 1)
    real_rmtree = checkpoint.shutil.rmtree

    def killed_mid_delete(path, *args, **kwargs):
        next(p for p in path.iterdir() if p.name.endswith(".safetensors")).unlink()  # one file gone...
        raise KeyboardInterrupt("simulated kill")  # ...then the process dies (no except OSError runs)

    monkeypatch.setattr(checkpoint.shutil, "rmtree", killed_mid_delete)
    with pytest.raises(KeyboardInterrupt):
        save(tmp_path, 2, keep_last_n=1)
    monkeypatch.setattr(checkpoint.shutil, "rmtree", real_rmtree)

    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-pruned-step_00000001-")]
    assert len(leftovers) == 1  # the half-deleted checkpoint sits under a hidden name...
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_00000002"]  # ...never as step_00000001
    assert resume_checkpoint(tmp_path)[0] == tmp_path / "step_00000002"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000002"]  # swept at the start of the resume


def test_leftover_temporaries_are_swept_at_the_next_save(tmp_path):
    save(tmp_path, 1)
    for name in (".tmp-pruned-step_00000000-deadbeef", ".tmp-step_00000002-cafef00d"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "policy.safetensors").write_bytes(b"partial")
    (tmp_path / ".tmp-final_model-0123abcd").mkdir()  # not ours to sweep here
    assert latest_checkpoint(tmp_path) == tmp_path / "step_00000001"

    save(tmp_path, 3)

    assert sorted(p.name for p in tmp_path.iterdir()) == [".tmp-final_model-0123abcd", "step_00000001", "step_00000003"]
    sweep_leftovers(tmp_path / "missing")  # a root that does not exist yet is fine


def test_an_undeletable_old_checkpoint_warns_and_keeps_training(tmp_path, monkeypatch):
    save(tmp_path, 1)

    def refuse(path, *args, **kwargs):
        raise PermissionError("simulated")

    monkeypatch.setattr(checkpoint.shutil, "rmtree", refuse)
    with pytest.warns(UserWarning, match="retried at the next save"):
        newest = save(tmp_path, 2, keep_last_n=1)
    assert list_checkpoints(tmp_path) == [newest]


# ---------------------------------------------------------------------------------------------
# --resume


def test_resume_takes_the_newest_checkpoint_when_it_verifies(tmp_path):
    save(tmp_path, 1)
    save(tmp_path, 2)
    path, loaded, state = resume_checkpoint(tmp_path)
    assert path == tmp_path / "step_00000002" and state == {"step": 2}
    assert torch.equal(loaded["policy"]["w"], groups(2.0)["policy"]["w"])
    assert resume_checkpoint(tmp_path / "none") is None


def test_resume_refuses_a_corrupt_newest_in_one_line_naming_the_one_that_verifies(tmp_path):
    save(tmp_path, 1)
    newest = save(tmp_path, 2)
    flip_last_byte(newest / "policy.safetensors")

    with pytest.raises(ResumeRefused) as error:
        resume_checkpoint(tmp_path)
    message = str(error.value)
    assert isinstance(error.value, CheckpointCorruptError) and isinstance(error.value, RunFailed)
    assert "\n" not in message
    assert f"{newest} fails verification: {newest / 'policy.safetensors'}: sha256 mismatch" in message
    assert f"the newest that verifies is {tmp_path / 'step_00000001'}" in message
    assert "checkpoint.fallback=true" in message
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_00000001", "step_00000002"]  # nothing moved


def test_fallback_skips_a_half_deleted_and_a_corrupt_checkpoint(tmp_path, capsys):
    oldest = save(tmp_path, 1)
    half_deleted = save(tmp_path, 2)  # as an in-place delete that was cut short leaves it
    (half_deleted / "optimizer.safetensors").unlink()
    (half_deleted / "state.json").unlink()
    newest = save(tmp_path, 3)
    rewrite_manifest(newest, lambda m: m["files"]["state.json"].pop("sha256"))

    path, loaded, state = resume_checkpoint(tmp_path, fallback=True)

    assert path == oldest and state == {"step": 1}
    assert torch.equal(loaded["policy"]["w"], groups(1.0)["policy"]["w"])
    printed = capsys.readouterr().out
    assert printed.count("\n") == 1
    assert f"{newest} fails verification" in printed and f"resuming from {oldest}" in printed
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "corrupt-step_00000002",
        "corrupt-step_00000003",
        "step_00000001",
    ]
    save(tmp_path, 2)  # the resumed run can write its next steps again


def test_resume_with_nothing_that_verifies_says_so(tmp_path):
    for step in (1, 2):
        flip_last_byte(save(tmp_path, step) / "state.json")
    for fallback in (False, True):
        with pytest.raises(ResumeRefused, match=f"no older checkpoint under {tmp_path} verifies"):
            resume_checkpoint(tmp_path, fallback=fallback)
    assert len(list_checkpoints(tmp_path)) == 2


# ---------------------------------------------------------------------------------------------
# Weights load strictly


def test_learner_weights_load_strictly(tiny_model_path):
    from actors.learner import Learner
    from relay.config import load_config

    learner = Learner(PolicySettings.of(load_config(None, [])), tiny_model_path, num_threads=1)
    saved, meta = learner.state()
    policy = saved["policy"]
    with pytest.raises(RuntimeError, match="Unexpected key"):
        learner.load_state({**saved, "policy": {**policy, "stray.weight": torch.zeros(1)}}, meta)
    first = next(iter(policy))
    with pytest.raises(RuntimeError, match="Missing key"):
        learner.load_state({**saved, "policy": {k: v for k, v in policy.items() if k != first}}, meta)
    learner.load_state(saved, meta)  # tied embeddings included: every key the model has, nothing else
