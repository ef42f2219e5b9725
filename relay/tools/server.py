"""The HTTP tool server: runs model-written Python code in the sandbox for rollout workers.

Protocol:
    POST /execute  {"code": "..."}   (any other field is ignored: it can never raise a limit)
        headers X-Relay-Client: <id>, X-Relay-Signature: <HMAC of the id>  optional: the fair
            queue's client, where the signature verifies under RELAY_TOOL_SECRET (else the peer
            address: relay/tools/client_auth.py)
        200 -> {"ok", "stdout", "stderr", "exit_code", "timed_out", "truncated", "error",
                "killed_reason", "seconds"}          the code ran (whatever it did)
        400 the body is not JSON for any reason (invalid UTF-8, too deep, a huge number, cut
            short) or has no "code" string        408 the request did not arrive by the read
        deadline   411 no Content-Length   413 body too large, or code over
        sandbox_limits.max_code_bytes (refused before it waits for a slot)   429 full: too many waiting
        requests (all, or this client's) or connections   500 the sandbox itself failed
    GET /health -> {"ok": true, "sandbox": "bwrap", "running": n, "waiting": m, ...}

    python -m relay.tools.server --port 30003 --host 127.0.0.1

Hostile or broken clients are bounded before they cost a sandbox: at most max_connections
connections (and handler threads) at once, each request read under one deadline for its head
and body (read_timeout_s), admission to the queue decided from the headers before the body is
read, and every reply, errors included, a JSON body rather than a dropped connection. Slots go
to clients fairly (relay.tools.admission.FairSlots): one rollout's backlog of slow runs does not
starve another's.

Why the standard library (http.server) and not aiohttp: `relay/` is torch + stdlib only, and
every request's work is a blocking subprocess wait, so one thread per request is the natural
shape. Responses close the connection (HTTP/1.0), so stopping the server never waits on idle
keep-alive sockets.

Binds 127.0.0.1 by default. Client ids are authenticated (signed with RELAY_TOOL_SECRET), the
requests themselves are not: anyone who reaches the port can run code in the sandbox, so expose it
beyond loopback only inside a private cluster network.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import get_args

from relay.config import ConfigError, SandboxConfig, SandboxMode, ToolServerConfig, validate_tool_server
from relay.tools.admission import FairSlots
from relay.tools.client_auth import SECRET_ENV, secret_from_env
from relay.tools.http_handler import Handler, HTTPServer, failure
from relay.tools.sandbox import SandboxResult, make_runner

log = logging.getLogger(__name__)


class ToolServer:
    """The server object: `start()` serves in a background thread, `serve_forever()` in this one."""

    def __init__(
        self,
        cfg: ToolServerConfig = ToolServerConfig(),
        runner: Callable[[str], SandboxResult] | None = None,
        secret: bytes | None = None,
    ):
        """`secret`: what signs client ids (relay/tools/client_auth.py); None: RELAY_TOOL_SECRET
        from the environment, and without it every client is counted by its peer address."""
        problems = validate_tool_server(cfg)
        if problems:
            raise ConfigError(problems)
        self.cfg = cfg
        self.secret = secret if secret is not None else secret_from_env()
        self._by_id = self._by_peer = 0  # requests counted by a signed id, by their peer address
        # Refuses here, before binding, when the sandbox cannot be built (sandbox="bwrap").
        self.runner = runner or make_runner(cfg.sandbox, cfg.sandbox_limits)
        self.slots = cfg.max_concurrency or 2 * (os.cpu_count() or 1)
        self.queue = FairSlots(self.slots, cfg.max_waiting, cfg.max_waiting_per_client)
        self.max_connections = cfg.max_connections or self.slots + cfg.max_waiting + 64
        self._lock = threading.Lock()
        self._served = self._connections = 0
        handler = type("Handler", (Handler,), {"timeout": cfg.socket_timeout_s})
        self._httpd = HTTPServer((cfg.host, cfg.port), handler)
        self._httpd.owner = self
        self._httpd._refused = []
        self._httpd.timeout = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    def _open_connection(self) -> bool:
        with self._lock:
            if self._connections >= self.max_connections:
                return False
            self._connections += 1
            return True

    def _close_connection(self) -> None:
        with self._lock:
            self._connections -= 1

    def count_client(self, signed: bool) -> None:
        with self._lock:
            if signed:
                self._by_id += 1
            else:
                self._by_peer += 1

    def health(self) -> dict:
        limits = self.cfg.sandbox_limits
        with self._lock:
            served, connections, by_id, by_peer = self._served, self._connections, self._by_id, self._by_peer
        return {
            "ok": True,
            "sandbox": self.cfg.sandbox,
            "slots": self.slots,
            "running": self.queue.running,
            "waiting": self.queue.waiting,
            "clients": self.queue.clients(),
            "client_ids": "signed" if self.secret else "by peer address",  # RELAY_TOOL_SECRET set or not
            "requests_by_id": by_id,  # a signed X-Relay-Client
            "requests_by_peer": by_peer,  # no id, or one not signed with the secret
            "served": served,
            "connections": connections,  # open HTTP connections (a GET /health counts its own)
            "max_connections": self.max_connections,
            "limits": {
                "wall_timeout_s": limits.wall_timeout_s,
                "cpu_seconds": limits.cpu_seconds,
                "memory_mb": limits.memory_mb,
                "max_pids": limits.max_pids,
                "max_output_bytes": limits.max_output_bytes,
            },
        }

    def code_too_large(self, code: str, at_most: int | None = None) -> str | None:
        """Why `code` is refused unrun (over sandbox_limits.max_code_bytes), else None. `at_most`: a
        bound on its UTF-8 size known without encoding it (the body's Content-Length: JSON escapes
        are never shorter than what they encode), so most requests are not measured at all."""
        limit = self.cfg.sandbox_limits.max_code_bytes
        if at_most is not None and at_most <= limit:
            return None
        if len(code.encode("utf-8", errors="surrogatepass")) > limit:
            return f"code is larger than {limit} bytes; not run"
        return None

    def execute(self, code: str, client: str = "local") -> tuple[int, dict]:
        """(HTTP status, body): take a place in line for `client`, wait for a slot, run the code."""
        if too_large := self.code_too_large(code):  # the sandbox would refuse it too, after the wait
            return 413, failure(too_large)
        refused = self.queue.admit(client)
        if refused:
            return 429, failure(refused)
        return self.execute_admitted(code, client)

    def execute_admitted(self, code: str, client: str) -> tuple[int, dict]:
        self.queue.acquire(client)
        try:
            res = self.runner(code)
        except Exception as e:  # the sandbox machinery broke (not the code): log it, tell the client
            log.exception("sandbox run failed")
            return 500, failure(f"sandbox failure: {type(e).__name__}: {e}")
        finally:
            self.queue.release(client)
            with self._lock:
                self._served += 1
        return 200, res.to_json()

    def start(self) -> ToolServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1}, name="relay-tool-server", daemon=True
        )
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        try:
            self._httpd.serve_forever(poll_interval=0.1)
        finally:
            self._httpd.server_close()

    def stop(self) -> None:
        """Stop accepting, wait for the requests in flight (each ends within the wall limit), close."""
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join()
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> ToolServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


_LIMIT_FLAGS = (
    "wall_timeout_s",
    "cpu_seconds",
    "memory_mb",
    "max_pids",
    "max_output_bytes",
    "tmpfs_mb",
    "max_open_files",
    "file_size_mb",
    "cpu_cores",
)


def main(argv: list[str] | None = None) -> None:
    d, limits = ToolServerConfig(), SandboxConfig()
    p = argparse.ArgumentParser(prog="python -m relay.tools.server", description=__doc__.split("\n")[0])
    p.add_argument("--host", default=d.host, help="bind address (default 127.0.0.1: loopback only)")
    p.add_argument("--port", type=int, default=d.port, help="0 picks a free port (printed on start)")
    p.add_argument(
        "--sandbox",
        choices=get_args(SandboxMode),
        default=d.sandbox,
        help="none runs code UNSANDBOXED (unsafe explicit opt-out)",
    )
    p.add_argument(
        "--max-concurrency", type=int, default=d.max_concurrency, help="sandboxes at once (0: two per CPU core)"
    )
    p.add_argument("--max-waiting", type=int, default=d.max_waiting, help="requests waiting beyond this get 429")
    p.add_argument("--max-waiting-per-client", type=int, default=d.max_waiting_per_client)
    p.add_argument("--max-connections", type=int, default=d.max_connections, help="0: slots + max-waiting + 64")
    p.add_argument("--max-body-bytes", type=int, default=d.max_body_bytes)
    p.add_argument(
        "--read-timeout-s", type=float, default=d.read_timeout_s, help="deadline for a request to arrive (else 408)"
    )
    # The sandbox_limits, one flag each (--memory-mb is sandbox_limits.memory_mb).
    for name in _LIMIT_FLAGS:
        default = getattr(limits, name)
        p.add_argument("--" + name.replace("_", "-"), type=type(default), default=default)
    p.add_argument("--python", default=limits.python, help="interpreter inside the sandbox")
    p.add_argument("--log-level", default="INFO")
    a = p.parse_args(argv)
    logging.basicConfig(level=a.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sandbox_limits = SandboxConfig(**{k: getattr(a, k) for k in (*_LIMIT_FLAGS, "python")})
    cfg = ToolServerConfig(
        host=a.host,
        port=a.port,
        sandbox=a.sandbox,
        sandbox_limits=sandbox_limits,
        max_concurrency=a.max_concurrency,
        max_waiting=a.max_waiting,
        max_waiting_per_client=a.max_waiting_per_client,
        max_connections=a.max_connections,
        max_body_bytes=a.max_body_bytes,
        read_timeout_s=a.read_timeout_s,
    )
    try:
        server = ToolServer(cfg)
    except Exception as e:  # SandboxUnavailable / bad settings: what is wrong, non-zero exit
        print(f"relay.tools.server: {e}", file=sys.stderr)
        sys.exit(2)
    # The first stdout line is machine-readable: tests and launchers read the port from it.
    print(f"relay tool server listening on {server.url} (sandbox={cfg.sandbox}, slots={server.slots})", flush=True)
    if server.secret is None:
        print(f"relay tool server: no {SECRET_ENV}: clients are told apart by address only", flush=True)

    def _interrupt(signum, frame):
        raise KeyboardInterrupt

    # SIGTERM stops like Ctrl-C: stop accepting, let the runs in flight finish, remove their cgroups.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
