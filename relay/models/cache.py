"""Where relay keeps what it derives once per machine (converted GGUF models, chat-template verdicts).

RELAY_CACHE if set, else $XDG_CACHE_HOME/relay, else ~/.cache/relay. Everything in it can be
deleted at any time: it is made again on the next use.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def cache_dir() -> Path:
    if os.environ.get("RELAY_CACHE"):
        return Path(os.environ["RELAY_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "relay"


def file_sha256(path: Path) -> str:
    """Streamed: a converted model's weights are hundreds of MB, read_bytes() would hold them all."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
