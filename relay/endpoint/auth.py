"""The endpoint's bearer token: one per run.

It is made once, where the run's actors are made (relay_trainer/pools.py), and handed by value to every
rollout worker's constructor, so each endpoint of the run accepts the same key, and a worker that
Ray restarts (the same constructor arguments) accepts it too: a client keeps working across the
restart. The agent programs' clients get it from their worker. It is never logged.
"""

from __future__ import annotations

import hmac
import os
import secrets

from relay.config import Config

TOKEN_ENV = "RELAY_ENDPOINT_TOKEN"


def run_token(cfg: Config) -> str | None:
    """The run's token: endpoint.token, else RELAY_ENDPOINT_TOKEN in this (the driver's) process,
    else a new random one; None when the run serves no endpoint."""
    if not (cfg.endpoint.enabled or cfg.task.agent):
        return None
    return cfg.endpoint.token or os.environ.get(TOKEN_ENV) or new_token()


def new_token() -> str:
    return secrets.token_urlsafe(24)  # 192 random bits


def authorized(header: str, token: str) -> bool:
    """Whether an Authorization header carries `token` (compared in constant time)."""
    scheme, _, key = header.partition(" ")
    try:  # header bytes that are not UTF-8 reach here as surrogates, which do not encode: no key
        presented = key.strip().encode()
    except UnicodeEncodeError:
        return False
    return scheme.lower() == "bearer" and hmac.compare_digest(presented, token.encode())
