"""The tool server's HTTP layer: one request handler and the threading server under ToolServer
(relay/tools/server.py), which owns the settings, the fair slots and the sandbox runs.

Everything a hostile client can send is answered here without a traceback: a missing or oversized
Content-Length, a full server (429, decided from the headers before the body is read), a body that
does not arrive within the read deadline (408), one that does not parse (400), a connection over
the cap (429 from the accepting thread, then drained).
"""

from __future__ import annotations

import io
import json
import logging
import socket
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from relay.tools.admission import DeadlineReader, parse_body
from relay.tools.client_auth import CLIENT_HEADER, SIGNATURE_HEADER, client_key

log = logging.getLogger("relay.tools.server")

_DRAIN_S = 1.0  # a connection refused over the cap is drained this long at most, then closed
_MAX_DRAINING = 1024  # beyond this many at once, refused connections are closed at once

__all__ = ["CLIENT_HEADER", "SIGNATURE_HEADER", "Handler", "HTTPServer", "failure"]


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


class Handler(BaseHTTPRequestHandler):
    server: HTTPServer
    protocol_version = "HTTP/1.0"
    server_version = "relay-tools/1"

    def setup(self) -> None:
        super().setup()
        self._replied = False
        # What http.server sets only once a request line was read: a 408 to a client that never sent
        # one (idle, or a line cut short) logs and writes these, and without them raised AttributeError.
        self.requestline, self.command, self.request_version = "", "", self.protocol_version
        self._reader = DeadlineReader(self.connection, time.monotonic() + self.server.owner.cfg.read_timeout_s)
        self.rfile = io.BufferedReader(self._reader)

    def handle(self) -> None:
        try:
            super().handle()
        finally:
            if self._reader.expired and not self._replied:  # the head never arrived in time
                log.info("%s: no request within the read deadline: 408", self.address_string())
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
        """The fair queue's key: the claimed id where the run's secret signed it, else the peer
        address (relay/tools/client_auth.py), so no caller can spend another's places in line."""
        owner = self.server.owner
        key, signed = client_key(
            self.headers.get(CLIENT_HEADER), self.headers.get(SIGNATURE_HEADER), self.client_address[0], owner.secret
        )
        owner.count_client(signed)
        return key

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
            del body  # a request waiting for a slot holds only its code, not its raw body too
        except BaseException:
            owner.queue.withdraw(client)
            raise
        if code is None:
            owner.queue.withdraw(client)
            self._error(400, why)
            return
        if too_large := owner.code_too_large(code, at_most=length):  # refused before it waits for a slot
            owner.queue.withdraw(client)
            self._error(413, too_large)
            return
        # Only the code goes on. Fields such as "timeout" or "memory_mb" are ignored on purpose:
        # limits come from the server's configuration, never from a model's tool call.
        status, reply = owner.execute_admitted(code, client)
        self._reply(status, reply)


class HTTPServer(ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins request threads: no sandbox outlives stop()
    block_on_close = True
    allow_reuse_address = True
    request_queue_size = 256  # listen backlog: bursts of 64+ connections wait in the kernel
    owner: Any  # the ToolServer: its cfg, queue, health(), execute_admitted(), connection counts
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
