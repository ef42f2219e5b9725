"""A torch.distributed Store whose values only holders of a per-run secret can write.

The weight broadcast group meets on a TCPStore the learner serves on a socket: its members
exchange their addresses (gloo) or the NCCL unique id through it. Anything that reaches that
socket can connect as a client, list the keys and set values, so a key prefix is no secret and
an unsigned entry could point a member at another process or let one join and send weights.
SignedStore wraps the store: every value it sets carries an HMAC-SHA256 of (key, value) under
the run's secret, and every value it reads must carry a valid one, or the read raises
ForgedStoreValue, which fails the group's set-up loudly instead of connecting to what the entry
names. The secret reaches the members through Ray (actor call arguments), never through the store.

A client without the secret can still delete keys or stall the set-up (its timeout ends that);
it cannot make a member accept an address, an id or a peer that the secret did not sign.
"""

from __future__ import annotations

import hashlib
import hmac
from datetime import timedelta

import torch.distributed as dist

MAC_BYTES = hashlib.sha256().digest_size
SECRET_BYTES = 32  # what the driver draws per run (secrets.token_bytes)


class ForgedStoreValue(RuntimeError):
    """A store entry not signed with this run's secret: another process wrote it."""


class SignedStore(dist.Store):
    def __init__(self, store: dist.Store, secret: bytes):
        super().__init__()
        if not isinstance(secret, bytes) or len(secret) < 16:
            raise ValueError("SignedStore needs a secret of at least 16 random bytes")
        self._store, self._secret = store, secret

    def _mac(self, key: str, value: bytes) -> bytes:
        name = key.encode()
        return hmac.digest(self._secret, len(name).to_bytes(8, "big") + name + value, "sha256")

    def set(self, key: str, value) -> None:
        value = value.encode() if isinstance(value, str) else bytes(value)
        self._store.set(key, self._mac(key, value) + value)

    def get(self, key: str) -> bytes:
        raw = self._store.get(key)
        mac, value = raw[:MAC_BYTES], raw[MAC_BYTES:]
        if len(mac) < MAC_BYTES or not hmac.compare_digest(mac, self._mac(key, value)):
            raise ForgedStoreValue(
                f"weight group store: the entry {key!r} is not signed with this run's secret "
                "(another process wrote it); refusing to use it"
            )
        return value

    # Keys themselves, counters and waiting carry nothing a member acts on: passed through.

    def add(self, key: str, value: int) -> int:
        return self._store.add(key, value)

    def check(self, keys: list[str]) -> bool:
        return self._store.check(keys)

    def wait(self, keys: list[str], timeout: timedelta | None = None) -> None:
        if timeout is None:
            self._store.wait(keys)
        else:
            self._store.wait(keys, timeout)

    def delete_key(self, key: str) -> bool:
        return self._store.delete_key(key)

    def num_keys(self) -> int:
        return self._store.num_keys()
