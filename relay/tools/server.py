"""The HTTP tool server: runs model-written Python code in the sandbox for rollout workers.

Protocol:
    POST /execute  {"code": "..."}   (any other field is ignored: it can never raise a limit)
        200 -> {"ok", "stdout", "stderr", "exit_code", "timed_out", "truncated", "error",
                "killed_reason", "seconds"}          the code ran (whatever it did)
        400 bad JSON / no "code" string   413 body too large   503 queue full (retry later)
        500 the sandbox itself failed
    GET /health -> {"ok": true, "sandbox": "bwrap", "running": n, "waiting": m, ...}

    python -m relay.tools.server --port 30003 --host 127.0.0.1

Why the standard library (http.server) and not aiohttp: `relay/` is torch + stdlib only, and
every request's work is a blocking subprocess wait, so one thread per request is the natural
shape; a semaphore bounds how many sandboxes run at once (the rest wait in line). Responses
close the connection (HTTP/1.0), so stopping the server never waits on idle keep-alive sockets.

Binds 127.0.0.1 by default. There is no authentication: expose it beyond loopback only inside a
private cluster network.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import get_args

from relay.config import ConfigError, SandboxConfig, SandboxMode, ToolServerConfig, validate_tool_server
from relay.tools.sandbox import SandboxResult, make_runner

log = logging.getLogger(__name__)


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

    def log_message(self, fmt, *args):  # route http.server's stderr lines to logging
        log.debug("%s " + fmt, self.address_string(), *args)

    def _reply(self, status: int, body: dict) -> None:
        data = json.dumps(body, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str) -> None:
        self._reply(status, failure(message))

    def do_GET(self) -> None:
        if self.path.rstrip("/") in ("/health", ""):
            self._reply(200, self.server.owner.health())
        else:
            self._error(404, f"no such endpoint {self.path!r}; use POST /execute or GET /health")

    def do_POST(self) -> None:
        if self.path.rstrip("/") != "/execute":
            self._error(404, f"no such endpoint {self.path!r}; use POST /execute")
            return
        cfg = self.server.owner.cfg
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._error(411, "Content-Length required")
            return
        if length < 0 or length > cfg.max_body_bytes:
            self._error(413, f"request body over {cfg.max_body_bytes} bytes")
            return
        try:
            payload = json.loads(self.rfile.read(length))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            self._error(400, f"request body is not JSON: {e}")
            return
        if not isinstance(payload, dict) or not isinstance(payload.get("code"), str):
            self._error(400, 'expected a JSON object {"code": "<python source>"}')
            return
        # Only the code goes on. Fields such as "timeout" or "memory_mb" are ignored on purpose:
        # limits come from the server's configuration, never from a model's tool call.
        status, body = self.server.owner.execute(payload["code"])
        self._reply(status, body)


class _FifoSlots:
    """A counting semaphore that hands free slots to waiters in arrival order.

    threading.Semaphore wakes an arbitrary waiter, which stretched p99 latency at 64 concurrent
    calls to twice the median (benchmarks/tool_throughput.py); first come, first served keeps
    the wait proportional to the queue ahead.
    """

    def __init__(self, n: int):
        self._free = n
        self._lock = threading.Lock()
        self._waiters: deque[threading.Event] = deque()

    def acquire(self) -> None:
        with self._lock:
            if self._free > 0 and not self._waiters:
                self._free -= 1
                return
            ticket = threading.Event()
            self._waiters.append(ticket)
        ticket.wait()  # release() handed its slot to us

    def release(self) -> None:
        with self._lock:
            if self._waiters:
                self._waiters.popleft().set()
            else:
                self._free += 1

    def __enter__(self) -> None:
        self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins request threads: no sandbox outlives stop()
    block_on_close = True
    allow_reuse_address = True
    request_queue_size = 256  # listen backlog: bursts of 64+ connections wait in the kernel
    owner: ToolServer


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
        slots = cfg.max_concurrency or 2 * (os.cpu_count() or 1)
        self.slots = slots
        self._slots = _FifoSlots(slots)
        self._lock = threading.Lock()
        self._running = self._waiting = self._served = 0
        handler = type("Handler", (_Handler,), {"timeout": cfg.socket_timeout_s})
        self._httpd = _HTTPServer((cfg.host, cfg.port), handler)
        self._httpd.owner = self
        self._httpd.timeout = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    def health(self) -> dict:
        with self._lock:
            limits = self.cfg.sandbox_limits
            return {
                "ok": True,
                "sandbox": self.cfg.sandbox,
                "slots": self.slots,
                "running": self._running,
                "waiting": self._waiting,
                "served": self._served,
                "limits": {
                    "wall_timeout_s": limits.wall_timeout_s,
                    "cpu_seconds": limits.cpu_seconds,
                    "memory_mb": limits.memory_mb,
                    "max_pids": limits.max_pids,
                    "max_output_bytes": limits.max_output_bytes,
                },
            }

    def execute(self, code: str) -> tuple[int, dict]:
        """(HTTP status, body): wait for a slot, run the code in the sandbox."""
        with self._lock:
            if self._waiting >= self.cfg.max_waiting:
                return 503, failure("tool server busy: too many waiting requests")
            self._waiting += 1
        with self._slots:
            with self._lock:
                self._waiting -= 1
                self._running += 1
            try:
                res = self.runner(code)
            except Exception as e:  # the sandbox machinery broke (not the code): log it, tell the client
                log.exception("sandbox run failed")
                return 500, failure(f"sandbox failure: {type(e).__name__}: {e}")
            finally:
                with self._lock:
                    self._running -= 1
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
    p.add_argument("--max-waiting", type=int, default=d.max_waiting)
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
