"""What `pip install .` brings: every package (the loop's included), the shipped configs and models,
and the `relay` command, whose entry points answer as `python driver.py` and `python -m` do."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from setuptools import find_namespace_packages

from relay.run.recipes import recipe_path, shipped_configs
from relay_trainer import cli

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def test_every_package_folder_is_listed():
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    found = {
        p
        for p in find_namespace_packages(where=str(REPO), include=["relay*", "actors*", "relay_trainer*"])
        if (REPO / p.replace(".", "/") / "__init__.py").is_file()
    }
    assert found <= listed, sorted(found - listed)
    assert PYPROJECT["tool"]["setuptools"]["package-dir"]["relay.recipes"] == "configs"
    assert PYPROJECT["project"]["scripts"]["relay"] == "relay_trainer.cli:main"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(REPO)],
        check=True,
        capture_output=True,
    )
    return zipfile.ZipFile(next(out.glob("relay-*.whl")))


def test_the_wheel_holds_the_loop_the_configs_the_models_and_the_command(wheel):
    names = set(wheel.namelist())
    assert {
        "relay_trainer/loop.py",
        "relay_trainer/ppo_trainer.py",
        "relay/api/config_store.py",
        "relay_trainer/pools.py",
    } <= names
    shipped = {f"relay/recipes/{name}.yaml" for name in shipped_configs()}
    assert shipped and shipped <= names
    assert "relay/models/shipped/manifest.json" in names
    assert any(n.startswith("relay/models/shipped/tiny/") and n.endswith(".safetensors") for n in names)
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "relay = relay_trainer.cli:main" in wheel.read(entry_points).decode()
    assert not any(n.startswith(("tests/", "configs/")) or n in ("driver.py", "tune.py") for n in names)


def test_an_installed_relay_finds_its_configs_by_name(wheel, tmp_path):
    site = tmp_path / "site-packages"
    wheel.extractall(site)  # what pip puts in site-packages
    probe = "from relay.run.recipes import recipe_path; print(recipe_path('default'))"
    done = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(site)!r}); {probe}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == str(site / "relay" / "recipes" / "default.yaml")


def test_shipped_configs_by_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a folder with no configs/ in it, as outside the repository
    assert Path(recipe_path("ppo")) == REPO / "configs" / "ppo.yaml"
    assert Path(recipe_path("configs/default.yaml")) == REPO / "configs" / "default.yaml"
    assert recipe_path("mine.yaml") == "mine.yaml"  # not shipped: loading it names the missing file
    (tmp_path / "ppo.yaml").write_text("training: {steps: 1}\n")
    assert recipe_path("ppo.yaml") == "ppo.yaml"  # a file that exists wins over a shipped name


def test_the_relay_command(capsys, tmp_path, monkeypatch):
    assert cli.main([]) == 0 and "relay train" in capsys.readouterr().out
    assert cli.main(["configs"]) == 0 and "  default\n" in capsys.readouterr().out
    assert cli.main(["tarin"]) == 2 and "relay: error: unknown command 'tarin'" in capsys.readouterr().err
    monkeypatch.chdir(tmp_path)
    # bad input: one line, exit 2, before Ray starts; the shipped default found from another folder
    assert cli.main(["train", "--config", "default", "training.lrr=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["relay: error: training.lrr: unknown key (did you mean training.lr?)"]
    assert cli.main(["show", str(tmp_path)]) == 2  # the show command's own answer: no samples there
    assert "no sample files" in capsys.readouterr().err
