"""cluster.yaml: valid for Ray's cluster launcher, token auth on every node, dashboard on loopback.

Validation runs the steps `ray up` runs before it touches a cloud (prepare_config: merge the
provider's defaults and the setup commands; then validate_config against Ray's JSON schema), so
it needs neither network nor credentials.
"""

from __future__ import annotations

import copy
import ipaddress
import re
import shlex
from pathlib import Path

import pytest
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

REPO = Path(__file__).resolve().parents[2]
CLUSTER_YAML = REPO / "cluster.yaml"


@pytest.fixture(scope="module")
def raw() -> dict:
    return yaml.safe_load(CLUSTER_YAML.read_text())


@pytest.fixture(scope="module")
def prepared(raw) -> dict:
    return prepare_config(copy.deepcopy(raw))


def all_strings(node) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in all_strings(k) + all_strings(v)]
    if isinstance(node, list):
        return [s for v in node for s in all_strings(v)]
    return []


def ray_start_args(commands: list[str]) -> list[list[str]]:
    """The arguments of every `ray start` in a list of shell commands."""
    found = []
    for command in commands:
        for part in command.split(";"):
            words = shlex.split(part)
            for i in range(len(words) - 1):
                if words[i] == "ray" and words[i + 1] == "start":
                    found.append(words[i + 2 :])
    return found


def env_before_ray_start(command: str) -> dict[str, str]:
    """VAR=value assignments that prefix `ray start` in one shell command."""
    segment = next(p for p in command.split(";") if "ray start" in p)
    env = {}
    for word in shlex.split(segment):
        if word == "ray":
            break
        key, _, value = word.partition("=")
        env[key] = value
    return env


def test_passes_ray_cluster_config_validation(prepared):
    validate_config(prepared)  # raises jsonschema.ValidationError / ValueError when invalid
    assert prepared["provider"]["type"] == "aws"
    head = prepared["available_node_types"][prepared["head_node_type"]]
    assert head["resources"].get("GPU", 0) == 0  # CPU-only head
    workers = [t for n, t in prepared["available_node_types"].items() if n != prepared["head_node_type"]]
    assert any(t["resources"].get("GPU", 0) > 0 and t["max_workers"] >= t["min_workers"] >= 0 for t in workers)


@pytest.mark.parametrize("section", ["head_start_ray_commands", "worker_start_ray_commands"])
def test_token_auth_on_every_ray_start(raw, prepared, section):
    # Check both the file and what `ray up` runs after merging Ray's defaults.
    for config in (raw, prepared):
        starts = [c for c in config[section] if "ray start" in c]
        assert starts, f"{section} starts no Ray"
        for command in starts:
            assert env_before_ray_start(command).get("RAY_AUTH_MODE") == "token", command
    # Each node gets the cluster's token in the default place Ray reads it from.
    assert raw["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"


def test_ray_start_flags_exist_and_dashboard_is_loopback(prepared):
    from ray.scripts.scripts import start

    head = ray_start_args(prepared["head_start_ray_commands"])
    workers = ray_start_args(prepared["worker_start_ray_commands"])
    assert len(head) == 1 and "--head" in head[0] and len(workers) == 1
    for args in head + workers:
        # Ray's own CLI parser: an unknown or misspelt flag fails here, not on the cluster.
        with start.make_context("ray start", list(args)) as ctx:
            params = ctx.params
        if "--head" in args:
            assert ipaddress.ip_address(params["dashboard_host"]).is_loopback
    # Nothing anywhere in the config binds to every interface.
    assert not [s for s in all_strings(prepared) if "0.0.0.0" in s]


def test_setup_installs_the_project_with_a_ray_floor(prepared):
    setup = " && ".join(prepared["setup_commands"])
    assert "bash scripts/setup.sh" in setup
    assert "ray>=2.60" in setup
    assert prepared["file_mounts"]["~/relay"] == "."
    assert ".venv" in prepared["rsync_exclude"]  # nodes build their own (CPU vs CUDA torch)
    # merge_setup_commands put the common setup before the head's and the workers' own.
    assert prepared["head_setup_commands"][: len(prepared["setup_commands"])] == prepared["setup_commands"]


def test_commented_gcp_alternative_is_valid_too(raw):
    text = CLUSTER_YAML.read_text()
    block = re.search(r"^# --- GCP alternative ---\n(.*?)^# --- end GCP alternative ---", text, re.S | re.M).group(1)
    # Prose first, then a bare "#" line, then the YAML with "# " in front of each line.
    lines = block.splitlines()
    body = "\n".join(line[2:] for line in lines[lines.index("#") + 1 :])
    gcp = yaml.safe_load(body)
    assert set(gcp) == {"provider", "auth", "available_node_types", "head_node_type", "head_setup_commands"}
    config = {**copy.deepcopy(raw), **gcp}
    prepared = prepare_config(config)
    validate_config(prepared)
    assert prepared["provider"]["type"] == "gcp"
