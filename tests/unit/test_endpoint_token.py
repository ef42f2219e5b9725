"""The endpoint's bearer token is one per run (relay/endpoint/auth.py): endpoint.token, else
RELAY_ENDPOINT_TOKEN in the driver's environment, else random; a secret the config never writes
out. tests/actors/test_endpoint_actor.py checks that a run's workers, restarted ones too, take it."""

from __future__ import annotations

import pytest

from relay.config import ConfigError, load_config
from relay.endpoint.auth import TOKEN_ENV, authorized, run_token


def test_one_token_per_run_from_config_environment_or_chance(monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    assert run_token(load_config(None, [])) is None  # no endpoint, no token
    serving = load_config(None, ["endpoint.enabled=true"])
    made = {run_token(serving) for _ in range(3)}
    assert len(made) == 3 and all(len(t) >= 32 for t in made)  # each run its own, 192 random bits
    monkeypatch.setenv(TOKEN_ENV, "from-the-environment")
    assert run_token(serving) == "from-the-environment"
    named = load_config(None, ["task.agent=relay.endpoint.example_agent:run", "endpoint.token=from-the-config"])
    assert run_token(named) == "from-the-config"  # the config wins


def test_the_token_is_never_written_out():
    cfg = load_config(None, ["endpoint.enabled=true", "endpoint.token=s3cret-key"])
    assert "s3cret-key" not in repr(cfg) and "s3cret-key" not in str(cfg.to_dict())
    assert cfg.to_dict()["endpoint"]["token"] is None  # config.yaml, the loggers' config
    with pytest.raises(ConfigError, match="endpoint.token: must be non-empty printable text without spaces"):
        load_config(None, ["endpoint.token=two words"])


def test_authorization_header():
    assert authorized("Bearer k3y", "k3y") and authorized("bearer  k3y ", "k3y")
    assert not any(authorized(h, "k3y") for h in ("", "k3y", "Basic k3y", "Bearer k3", "Bearer k3yy"))
