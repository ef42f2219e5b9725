"""The HTTP tool server: runs model-written Python code in the sandbox for rollout workers.

Protocol:
    POST /execute  {"code": "..."}   (any other field is ignored: it can never raise a limit)
        header X-Relay-Client: <id>  optional; the fair queue's client (else the peer address)
        200 -> {"ok", "stdout", "stderr", "exit_code", "timed_out", "truncated", "error",
                "killed_reason", "seconds"}          the code ran (whatever it did)
        400 the body is not JSON for any reason (invalid UTF-8, too deep, a huge number, cut
            short) or has no "code" string        408 the request did not arrive by the read
        deadline   411 no Content-Length   413 body too large   429 full: too many waiting
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

Binds 127.0.0.1 by default. There is no authentication: expose it beyond loopback only inside a
private cluster network.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import get_args

from relay.config import ConfigError, SandboxConfig, SandboxMode, ToolServerConfig, validate_tool_server
from relay.tools.admission import DeadlineReader, FairSlots, parse_body
from relay.tools.sandbox import SandboxResult, make_runner

log = logging.getLogger(__name__)

_DRAIN_S = 1.0  # a connection refused over the cap is drained this long at most, then closed
_MAX_DRAINING = 1024  # beyond this many at once, refused connections are closed at once

CLIENT_HEADER = "X-Relay-Client"


def failure(message: str) -> dict:
    """A reply body for a request whose code did not run: the shape of a run result, with `error`."""
    return {
        "ok": False,
        "stdout": "",
        "stderr": "",
        "exit_code": None,
        "timed_out": False,
        "truncated": False,
        "error": message,
    }


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer
    protocol_version = "HTTP/1.0"
    server_version = "relay-tools/1"

    def setup(self) -> None:
        super().setup()
        self._replied = False
        self._reader = DeadlineReader(self.connection, time.monotonic() + self.server.owner.cfg.read_timeout_s)
        self.rfile = io.BufferedReader(self._reader)

    def handle(self) -> None:
        try:
            super().handle()
        finally:
            if self._reader.expired and not self._replied:  # the head never arrived in time
                try:
                    self._error(408, "request not received within the read deadline")
                except OSError:
                    pass

    def log_message(self, fmt, *args):  # route http.server's stderr lines to logging
        log.debug("%s " + fmt, self.address_string(), *args)

    def _reply(self, status: int, body: dict) -> None:
        self._replied = True
        self.connection.settimeout(self.timeout)  # the read deadline does not bound the answer
        data = json.dumps(body, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str) -> None:
        self._reply(status, failure(message))

    def _refuse_unread(self, status: int, message: str, length: int) -> None:
        """Answer before reading the body, then read and drop it (up to `length`, within the read
        deadline): closing with unread data would reset the connection and could lose the answer."""
        self._error(status, message)
        self.wfile.flush()
        try:
            self.connection.shutdown(socket.SHUT_WR)
            left = min(max(length, 0), self.server.owner.cfg.max_body_bytes) + 65536
            while left > 0 and (chunk := self.rfile.read1(min(left, 65536))):
                left -= len(chunk)
        except OSError:  # TimeoutError included: the client stopped sending
            pass

    def do_GET(self) -> None:
        if self.path.rstrip("/") in ("/health", ""):
            self._reply(200, self.server.owner.health())
        else:
            self._error(404, f"no such endpoint {self.path!r}; use POST /execute or GET /health")

    def client_id(self) -> str:
        given = self.headers.get(CLIENT_HEADER, "")
        return given[:128] if given.isprintable() and given else self.client_address[0]

    def do_POST(self) -> None:
        if self.path.rstrip("/") != "/execute":
            self._refuse_unread(404, f"no such endpoint {self.path!r}; use POST /execute", 0)
            return
        owner, cfg = self.server.owner, self.server.owner.cfg
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._refuse_unread(411, "Content-Length required", 0)
            return
        if length < 0 or length > cfg.max_body_bytes:
            self._refuse_unread(413, f"request body over {cfg.max_body_bytes} bytes", length)
            return
        client = self.client_id()
        refused = owner.queue.admit(client)  # before the body is read: a full server reads nothing
        if refused:
            self._refuse_unread(429, refused, length)
            return
        try:
            try:
                body = self.rfile.read(length)
            except TimeoutError:
                owner.queue.withdraw(client)
                self._error(408, f"request body not received within {cfg.read_timeout_s:g} s")
                return
            except OSError as e:
                owner.queue.withdraw(client)
                log.debug("client %s went away mid-body: %s", client, e)
                return
            code, why = parse_body(body) if len(body) == length else (None, "request body cut short")
        except BaseException:
            owner.queue.withdraw(client)
            raise
        if code is None:
            owner.queue.withdraw(client)
            self._error(400, why)
            return
        # Only the code goes on. Fields such as "timeout" or "memory_mb" are ignored on purpose:
        # limits come from the server's configuration, never from a model's tool call.
        status, reply = owner.execute_admitted(code, client)
        self._reply(status, reply)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins request threads: no sandbox outlives stop()
    block_on_close = True
    allow_reuse_address = True
    request_queue_size = 256  # listen backlog: bursts of 64+ connections wait in the kernel
    owner: ToolServer
    _refused: list[tuple[float, socket.socket]]  # (drain until, socket) of connections over the cap

    def process_request(self, request, client_address) -> None:
        """A thread per connection, up to max_connections; past that, a 429 from this thread."""
        if not self.owner._open_connection():
            self._refuse(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.owner._close_connection()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.owner._close_connection()

    def _refuse(self, request: socket.socket) -> None:
        """429 from the accepting thread, which never waits on this client: the socket is then
        drained by service_actions() until the client closes (up to a second), since closing
        with unread request bytes would reset the connection and could lose the answer."""
        body = json.dumps(failure(f"tool server full: {self.owner.max_connections} connections open")).encode()
        head = f"HTTP/1.0 429 Too Many Requests\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        try:
            request.setblocking(False)
            request.send(head.encode() + b"Connection: close\r\n\r\n" + body)
            request.shutdown(socket.SHUT_WR)
        except OSError:
            self.shutdown_request(request)
            return
        if len(self._refused) >= _MAX_DRAINING:
            self.shutdown_request(request)
        else:
            self._refused.append((time.monotonic() + _DRAIN_S, request))

    def service_actions(self) -> None:
        """Between accepts (every poll interval): drain refused sockets, close finished ones."""
        super().service_actions()
        now, keep = time.monotonic(), []
        for deadline, sock in self._refused:
            try:
                while sock.recv(65536):
                    pass
                done = True  # the client closed its side
            except BlockingIOError:
                done = now > deadline
            except OSError:
                done = True
            if done:
                self.shutdown_request(sock)
            else:
                keep.append((deadline, sock))
        self._refused = keep

    def server_close(self) -> None:
        super().server_close()
        for _, sock in self._refused:
            self.shutdown_request(sock)
        self._refused = []


class ToolServer:
    """The server object: `start()` serves in a background thread, `serve_forever()` in this one."""

    def __init__(
        self, cfg: ToolServerConfig = ToolServerConfig(), runner: Callable[[str], SandboxResult] | None = None
    ):
        problems = validate_tool_server(cfg)
        if problems:
            raise ConfigError(problems)
        self.cfg = cfg
        # Refuses here, before binding, when the sandbox cannot be built (sandbox="bwrap").
        self.runner = runner or make_runner(cfg.sandbox, cfg.sandbox_limits)
        self.slots = cfg.max_concurrency or 2 * (os.cpu_count() or 1)
        self.queue = FairSlots(self.slots, cfg.max_waiting, cfg.max_waiting_per_client)
        self.max_connections = cfg.max_connections or self.slots + cfg.max_waiting + 64
        self._lock = threading.Lock()
        self._served = self._connections = 0
        handler = type("Handler", (_Handler,), {"timeout": cfg.socket_timeout_s})
        self._httpd = _HTTPServer((cfg.host, cfg.port), handler)
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

    def health(self) -> dict:
        limits = self.cfg.sandbox_limits
        with self._lock:
            served, connections = self._served, self._connections
        return {
            "ok": True,
            "sandbox": self.cfg.sandbox,
            "slots": self.slots,
            "running": self.queue.running,
            "waiting": self.queue.waiting,
            "clients": self.queue.clients(),
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

    def execute(self, code: str, client: str = "local") -> tuple[int, dict]:
        """(HTTP status, body): take a place in line for `client`, wait for a slot, run the code."""
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
