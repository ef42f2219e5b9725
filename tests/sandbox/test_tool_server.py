"""The tool server against hostile clients: bad bodies, slow senders, floods, one client's backlog.

The server is real (relay.tools.server.ToolServer on 127.0.0.1); the sandbox behind it is a
recording stand-in, so what is tested is the HTTP front: every request is answered with a JSON
body (never a dropped connection), nothing bad reaches the runner, and the queue stays fair.
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import threading
import time
import tracemalloc

import pytest

from relay.config import SandboxConfig, ToolServerConfig
from relay.tools.client_auth import sign
from relay.tools.http_handler import CLIENT_HEADER, SIGNATURE_HEADER
from relay.tools.sandbox import SandboxResult
from relay.tools.server import ToolServer

SECRET = b"a test secret, 16+ characters"


class Runner:
    """Stands in for the sandbox: records each code it runs; code starting with "block" waits for the gate."""

    def __init__(self):
        self.ran: list[str] = []
        self.gate = threading.Event()
        self.lock = threading.Lock()

    def __call__(self, code: str) -> SandboxResult:
        with self.lock:
            self.ran.append(code)
        if code.startswith("block"):
            self.gate.wait(30)
        return SandboxResult(code, "", 0)


@pytest.fixture
def serve():
    servers = []

    def make(**kw) -> tuple[ToolServer, Runner]:
        runner = Runner()
        server = ToolServer(ToolServerConfig(port=0, **kw), runner=runner, secret=SECRET).start()
        servers.append((server, runner))
        return server, runner

    yield make
    for server, runner in servers:
        runner.gate.set()
        server.stop()


def raw(server: ToolServer, data: bytes, hold_open: bool = False, timeout: float = 30) -> tuple[int, dict]:
    """Send bytes as they are; (status, JSON body) of the answer. hold_open: do not half-close
    after sending (a client that stops mid-request)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=timeout) as s:
        s.sendall(data)
        if not hold_open:
            s.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def post(server: ToolServer, body: bytes, client: str | None = None, length: int | None = None) -> bytes:
    headers = f"Content-Length: {len(body) if length is None else length}\r\n"
    if client:  # signed: each id is a client of its own (relay/tools/client_auth.py)
        headers += f"{CLIENT_HEADER}: {client}\r\n{SIGNATURE_HEADER}: {sign(SECRET, client)}\r\n"
    return f"POST /execute HTTP/1.0\r\n{headers}\r\n".encode() + body


def call(server: ToolServer, code: str, client: str) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.request(
            "POST",
            "/execute",
            json.dumps({"code": code}),
            {CLIENT_HEADER: client, SIGNATURE_HEADER: sign(SECRET, client)},
        )
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def wait_for(server: ToolServer, **counts) -> None:
    end = time.monotonic() + 20
    while any(server.health()[k] != v for k, v in counts.items()):
        assert time.monotonic() < end, (server.health(), counts)
        time.sleep(0.01)


HOSTILE_BODIES = {
    "invalid-utf8": b'{"code": "print(1)\xff\xfe"}',
    "deep-nesting": b'{"code": "x", "n": ' + b"[" * 200_000 + b"]" * 200_000 + b"}",
    "huge-integer": b'{"code": "x", "n": ' + b"9" * 100_000 + b"}",
    "utf8-bom": b'\xef\xbb\xbf{"code": "x"}',
    "utf16": '{"code": "x"}'.encode("utf-16"),
    "truncated": b'{"code": "pri',
    "empty": b"",
    "not-json": b"<xml>code</xml>",
    "not-an-object": b'["print(1)"]',
    "code-not-a-string": b'{"code": 5}',
    "nul-bytes": b"\x00" * 1000,
}


@pytest.mark.parametrize("name", HOSTILE_BODIES)
def test_any_bad_body_is_400_with_a_reason(serve, name):
    server, runner = serve()
    status, reply = raw(server, post(server, HOSTILE_BODIES[name]))
    assert status == 400 and reply["ok"] is False and reply["error"], reply
    assert runner.ran == []
    assert server.health()["waiting"] == 0  # the admitted request gave its place back


def test_body_shorter_than_its_length_is_400(serve):
    server, runner = serve()
    status, reply = raw(server, post(server, b'{"code": "x"}', length=100))  # then half-closed
    assert status == 400 and "cut short" in reply["error"] and runner.ran == []


def test_slow_or_half_sent_request_gets_408_at_the_deadline(serve):
    server, runner = serve(read_timeout_s=0.5)
    status, reply = raw(server, post(server, b'{"code": "pri', length=100), hold_open=True)
    assert status == 408 and "not received within 0.5 s" in reply["error"]
    status, reply = raw(server, b"POST /execute HTTP/1.0\r\nContent-Le", hold_open=True)  # the head never ends
    assert status == 408 and "read deadline" in reply["error"]
    assert runner.ran == [] and server.health()["waiting"] == 0


def test_oversized_body_is_refused_unread_with_413(serve):
    server, runner = serve(max_body_bytes=1000)
    status, reply = raw(server, post(server, b"x" * 5000))
    assert status == 413 and "over 1000 bytes" in reply["error"] and runner.ran == []


def test_admission_is_decided_before_the_body_is_read(serve):
    server, runner = serve(max_concurrency=1, max_waiting=3, max_waiting_per_client=2)
    threads = [threading.Thread(target=call, args=(server, f"block-a{i}", "a")) for i in range(3)]
    for t in threads:
        t.start()
    wait_for(server, running=1, waiting=2)
    # Client a is at its own limit: refused from the head alone (no body is ever sent).
    status, reply = raw(server, post(server, b"", client="a", length=50), hold_open=True)
    assert status == 429 and "for this client" in reply["error"]
    # Another client is still admitted, until the whole queue is full.
    b = threading.Thread(target=call, args=(server, "b0", "b"))
    b.start()
    wait_for(server, waiting=3)
    status, reply = raw(server, post(server, b"", client="c", length=50), hold_open=True)
    assert status == 429 and "3 requests waiting" in reply["error"]
    runner.gate.set()
    for t in [*threads, b]:
        t.join()
    assert sorted(runner.ran) == ["b0", "block-a0", "block-a1", "block-a2"]
    wait_for(server, running=0, waiting=0, clients=0)


def test_connection_cap_answers_429_without_a_thread(serve):
    server, runner = serve(max_connections=3, read_timeout_s=30)
    idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(3)]  # say nothing
    try:
        wait_for(server, connections=3)  # each holds a handler thread, waiting for its head
        status, reply = raw(server, post(server, b'{"code": "x"}'))
        assert status == 429 and "3 connections open" in reply["error"]
    finally:
        for s in idle:
            s.close()
    wait_for(server, connections=0)
    assert call(server, "x", "a") == (200, {**SandboxResult("x", "", 0).to_json()})


def test_one_clients_backlog_does_not_starve_another(serve):
    server, runner = serve(max_concurrency=1)
    threads = []
    for i in range(5):  # a rollout whose calls are slow: one running, four waiting
        threads.append(threading.Thread(target=call, args=(server, f"block-a{i}", "a")))
        threads[-1].start()
        wait_for(server, running=1, waiting=i)
    threads.append(threading.Thread(target=call, args=(server, "b0", "b")))
    threads[-1].start()
    wait_for(server, waiting=5)
    runner.gate.set()
    for t in threads:
        t.join()
    # First come first served would run b0 last; it runs as soon as a's running call ends.
    assert runner.ran[:2] == ["block-a0", "b0"], runner.ran
    assert runner.ran[2:] == [f"block-a{i}" for i in range(1, 5)]  # a's own calls keep their order


def test_health_and_good_calls_after_the_abuse(serve):
    server, runner = serve(read_timeout_s=0.5)
    for body in HOSTILE_BODIES.values():
        assert raw(server, post(server, body))[0] == 400
    assert raw(server, post(server, b"{", length=10), hold_open=True)[0] == 408
    assert call(server, "print(1)", "a")[0] == 200
    h = server.health()
    assert h["ok"] and h["running"] == h["waiting"] == h["clients"] == 0 and h["served"] == 1


@pytest.mark.parametrize("head", [b"", b"POST /exec"], ids=["idle", "request-line-cut"])
def test_no_request_line_by_the_deadline_is_408_and_one_log_line(serve, head, caplog, capfd):
    server, runner = serve(read_timeout_s=0.5)
    with caplog.at_level(logging.INFO, logger="relay.tools.server"):
        status, reply = raw(server, head, hold_open=True)
    assert status == 408 and "read deadline" in reply["error"]
    lines = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert len(lines) == 1 and "408" in lines[0].getMessage(), lines
    assert "Traceback" not in capfd.readouterr().err  # socketserver prints a handler's exception there
    assert runner.ran == [] and server.health()["waiting"] == 0


def test_code_over_max_code_bytes_is_refused_before_it_waits(serve):
    server, runner = serve(max_concurrency=1, sandbox_limits=SandboxConfig(max_code_bytes=1000))
    busy = threading.Thread(target=call, args=(server, "block", "a"))
    busy.start()
    wait_for(server, running=1)
    for code in ["x" * 1001, "é" * 501]:  # bytes, not characters, count
        status, reply = call(server, code, "b")  # answered while the only slot is still busy
        assert status == 413 and "larger than 1000 bytes" in reply["error"]
    assert call(server, "\\n" * 600, "b")[0] == 413  # 1200 bytes of code from 2400 bytes of JSON
    assert server.health()["waiting"] == 0
    runner.gate.set()
    busy.join()
    assert call(server, "x" * 1000, "b")[0] == 200
    assert runner.ran == ["block", "x" * 1000]


def test_a_waiting_request_holds_its_code_not_its_body_too(serve):
    server, runner = serve(max_concurrency=1, read_timeout_s=30, sandbox_limits=SandboxConfig(max_code_bytes=2**22))
    busy = threading.Thread(target=call, args=(server, "block", "a"))
    busy.start()
    wait_for(server, running=1)
    n, code = 4, "x = 1  # " + "a" * 1_900_000
    requests = [post(server, json.dumps({"code": code}).encode(), client=f"c{i}") for i in range(n)]
    senders = [threading.Thread(target=raw, args=(server, r)) for r in requests]
    tracemalloc.start()  # the requests' bytes were made before: what grows is the server's
    try:
        base = tracemalloc.get_traced_memory()[0]
        for t in senders:
            t.start()
        end = time.monotonic() + 20
        while sum(map(len, list(server.queue._queues.values()))) < n:  # read, decoded, waiting for the slot
            assert time.monotonic() < end, server.health()
            time.sleep(0.01)
        held = (tracemalloc.get_traced_memory()[0] - base) / n
    finally:
        tracemalloc.stop()
        runner.gate.set()
        for t in [busy, *senders]:
            t.join()
    assert held < 1.25 * len(code), held  # the decoded code; the raw body too would be 2x
