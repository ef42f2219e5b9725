"""The endpoint's connections, bounded: how many are open, how long each may sit idle or send, and
how often their troubles are logged.

    gate = Gate(max_connections=1024, max_per_peer=512)
    server = await loop.create_server(gate.factory(runner.server), host, port)   # aiohttp's handlers
    loop.set_exception_handler(OncePerInterval(log))                                # accept() errors

What aiohttp already bounds is left to it: `keepalive_timeout` closes a connection that has not
sent a whole request head within that many seconds of opening (or of its last reply), which covers
a silent connection, a request line cut short, headers that never end, and an idle keep-alive
connection. The body's deadline is the handler's (EndpointServer._body). aiohttp has no cap on
connections, so the Gate is one: past either cap a new connection first takes the place of the
oldest idle one (no request in progress: a hostile client holds idle sockets, a real one sends a
request), and only when every connection is busy is it refused with a 503. Tallies of evicted and
refused connections, and asyncio's errors (accept() out of file descriptors fires once per attempt),
go to the log once per interval, never once per event. So do requests aiohttp cannot parse (control
bytes in a header, a line too long): JsonErrors answers them in the endpoint's JSON error shape,
where aiohttp answered in text and logged a traceback per request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import time
from collections import Counter

from aiohttp import web

log = logging.getLogger("relay.endpoint")

LOG_INTERVAL_S = 10.0

_BUSY = json.dumps(
    {
        "error": {
            "message": "endpoint busy: too many open connections",
            "type": "server_error",
            "param": None,
            "code": None,
        }
    }
).encode()
BUSY_REPLY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(_BUSY), _BUSY)
)


def connection_cap(configured: int) -> int:
    """`configured`, lowered to half the process's open-file limit: the engine, Ray and the tokenizer
    need descriptors too, so the endpoint's sockets alone never exhaust them."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return configured if soft == resource.RLIM_INFINITY else max(1, min(configured, soft // 2))


class OncePerInterval:
    """A logger of repeated events: the first of a kind is logged at once, later ones of that kind
    are counted and reported in one line when the interval has passed. Also an asyncio exception
    handler (one line, no traceback: a traceback per failed accept() was 18 MB in 15 s)."""

    def __init__(self, logger: logging.Logger = log, interval_s: float = LOG_INTERVAL_S):
        self.logger, self.interval_s = logger, interval_s
        self.counts: Counter[str] = Counter()
        self.last: dict[str, float] = {}

    def event(self, what: str) -> None:
        now = time.monotonic()
        self.counts[what] += 1
        if now - self.last.get(what, -self.interval_s) >= self.interval_s:
            n, self.counts[what], self.last[what] = self.counts[what], 0, now
            self.logger.warning("%s (%d time%s in the last %g s)", what, n, "" if n == 1 else "s", self.interval_s)

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict) -> None:
        exc = context.get("exception")
        self.event(context.get("message", "asyncio error") + (f": {type(exc).__name__}: {exc}" if exc else ""))


class JsonErrors(web.RequestHandler):
    """aiohttp's connection handler, answering a request it cannot parse with one JSON error line."""

    events = OncePerInterval()

    def handle_error(self, request, status: int = 500, exc=None, message=None) -> web.StreamResponse:
        self.events.event(f"malformed HTTP request answered {status}: {type(exc).__name__}")
        if request.writer.output_size > 0:  # as aiohttp's: the reply has begun, the connection is broken
            raise ConnectionError("the response has begun; cannot send the error")
        error = {"message": f"malformed HTTP request: {str(message or exc or status)[:200]}", "param": None}
        kind = "server_error" if status >= 500 else "invalid_request_error"
        resp = web.json_response({"error": {**error, "type": kind, "code": None}}, status=status)
        resp.force_close()
        return resp


class Gate:
    """Open connections, per process and per peer address, in the order they opened."""

    def __init__(self, max_connections: int, max_per_peer: int, events: OncePerInterval | None = None):
        self.max_connections, self.max_per_peer = max_connections, max_per_peer
        self.events = events or OncePerInterval()
        self.open: dict[_Guard, None] = {}  # insertion-ordered: the oldest first
        self.per_peer: Counter[str] = Counter()
        self.by_transport: dict[asyncio.BaseTransport, _Guard] = {}

    def factory(self, handlers):
        """asyncio's protocol factory: each connection a guard around one of aiohttp's handlers."""
        return lambda: _Guard(self, handlers)

    def busy(self, transport) -> _Guard | None:
        """The guard of a request's connection (the handler marks it busy while it answers)."""
        return self.by_transport.get(transport)

    def admit(self, guard: _Guard) -> bool:
        if self.per_peer[guard.peer] >= self.max_per_peer and not self._evict(guard.peer):
            return False
        if len(self.open) >= self.max_connections and not self._evict(None):
            return False
        self.open[guard] = None
        self.per_peer[guard.peer] += 1
        self.by_transport[guard.transport] = guard
        return True

    def leave(self, guard: _Guard) -> None:
        if self.open.pop(guard, False) is None:
            self.per_peer[guard.peer] -= 1
            if not self.per_peer[guard.peer]:
                del self.per_peer[guard.peer]
            self.by_transport.pop(guard.transport, None)

    def _evict(self, peer: str | None) -> bool:
        for old in self.open:
            if not old.requests and (peer is None or old.peer == peer):
                self.events.event("closed the oldest idle connection to admit a new one (connection cap)")
                self.leave(old)
                old.transport.abort()
                return True
        return False


class _Guard(asyncio.Protocol):
    """One connection: admitted through the Gate, then every event handed to aiohttp's handler."""

    def __init__(self, gate: Gate, handlers):
        self.gate, self.handlers, self.inner, self.requests = gate, handlers, None, 0

    def connection_made(self, transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        if not self.gate.admit(self):
            self.gate.events.event("refused a connection: every open connection is busy (connection cap)")
            transport.write(BUSY_REPLY)
            transport.close()
            return
        self.inner = self.handlers()
        self.inner.connection_made(transport)

    def connection_lost(self, exc) -> None:
        self.gate.leave(self)
        if self.inner is not None:
            self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.inner is not None:
            self.inner.data_received(data)

    def eof_received(self):
        return self.inner.eof_received() if self.inner is not None else None

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()
