"""Who a tool-server request comes from: a claimed client id counts only when it is signed.

The fair queue (relay.tools.admission.FairSlots) gives each client its own line and its own cap
on waiting requests. Were the id taken on trust (the X-Relay-Client header alone), any caller
could spend another's cap (send as worker-7 until the real worker-7 gets 429) or escape its own
(a fresh id per request, each with an empty line). So an id counts only with X-Relay-Signature,
the HMAC-SHA256 of the id under a secret the run and the server share (RELAY_TOOL_SECRET in
both environments). Any other request is counted by its peer address: one line per
unauthenticated host, whatever ids it claims.

The signature is per id, not per request: it stops callers without the secret, not one that can
read a worker's traffic (plain HTTP on the cluster network) and replay its headers.
"""

from __future__ import annotations

import hashlib
import hmac
import os

SECRET_ENV = "RELAY_TOOL_SECRET"
CLIENT_HEADER = "X-Relay-Client"
SIGNATURE_HEADER = "X-Relay-Signature"
MIN_SECRET_CHARS = 16
MAX_ID_CHARS = 128
_DOMAIN = b"relay tool client id\0"  # a MAC made for this use only, never valid for another


def secret_from_env() -> bytes | None:
    """RELAY_TOOL_SECRET from this process's environment; None when unset or empty. A set secret
    shorter than MIN_SECRET_CHARS is refused (ValueError): it would sign ids that anyone can guess."""
    value = os.environ.get(SECRET_ENV, "")
    if not value:
        return None
    if len(value) < MIN_SECRET_CHARS:
        raise ValueError(f"{SECRET_ENV} is {len(value)} characters; use at least {MIN_SECRET_CHARS} random ones")
    return value.encode("utf-8", errors="surrogatepass")


def sign(secret: bytes, client_id: str) -> str:
    """The X-Relay-Signature value for `client_id` (hex)."""
    return hmac.new(secret, _DOMAIN + client_id.encode("utf-8", errors="surrogatepass"), hashlib.sha256).hexdigest()


def client_key(claimed: str | None, signature: str | None, peer: str, secret: bytes | None) -> tuple[str, bool]:
    """(the fair queue's key for a request, whether a claimed id was signed): "id:<id>" for an id
    signed with `secret`, else "peer:<address>". The prefixes keep the two kinds apart."""
    if secret and claimed and signature and len(claimed) <= MAX_ID_CHARS and claimed.isprintable():
        if hmac.compare_digest(sign(secret, claimed).encode(), signature.strip().encode("utf-8", errors="replace")):
            return "id:" + claimed, True
    return "peer:" + peer, False
