"""ToolClient against a scripted local server on 127.0.0.1: retries, deadline, truncation."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from relay.config import ConfigError, SandboxConfig, ToolsConfig
from relay.tools.client import ToolClient, truncate


class Scripted(ThreadingHTTPServer):
    """Answers request i with script[i] (the last entry repeats); counts requests."""

    daemon_threads = False
    block_on_close = True

    def __init__(self, script: list[str]):
        super().__init__(("127.0.0.1", 0), Handler)
        self.script, self.requests, self.codes, self.clients = script, 0, [], []
        self.release = threading.Event()
        self.lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    server: Scripted

    def log_message(self, *a):
        pass

    def _send(self, status: int, body: bytes, ctype: str = "application/json"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            i = self.server.requests
            self.server.requests += 1
            self.server.codes.append(payload["code"])
            self.server.clients.append(self.headers.get("X-Relay-Client"))
        action = self.server.script[min(i, len(self.server.script) - 1)]
        result = {
            "ok": True,
            "stdout": payload["code"],
            "stderr": "",
            "exit_code": 0,
            "timed_out": False,
            "truncated": False,
            "error": None,
        }
        if action == "reset":
            return  # close the connection without an answer
        if action == "slow":
            self.server.release.wait(10)
        if action == "big":
            result["stdout"] = "x" * 100_000
        if action == "failed-run":
            result.update(ok=False, stdout="", stderr="Traceback\n", exit_code=1, error="exited with code 1")
        if action == "garbage":
            self._send(200, b"<html>not json</html>", "text/html")
        elif action.isdigit():
            self._send(int(action), json.dumps({"error": f"scripted {action}"}).encode())
        else:
            self._send(200, json.dumps(result).encode())


@pytest.fixture
def make_server():
    servers = []

    def make(*script: str) -> Scripted:
        srv = Scripted(list(script))
        t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05})
        t.start()
        servers.append((srv, t))
        return srv

    yield make
    for srv, t in servers:
        srv.release.set()
        srv.shutdown()
        srv.server_close()  # joins the request threads
        t.join()


def client_for(srv: Scripted, max_output_bytes: int | None = None, **kw) -> ToolClient:
    kw = {"retry_delay": 0.01, "request_interval": 0.0, "timeout": 10.0, **kw}
    if max_output_bytes is not None:
        kw["sandbox_limits"] = SandboxConfig(max_output_bytes=max_output_bytes)
    return ToolClient(ToolsConfig(server_url=f"http://127.0.0.1:{srv.server_address[1]}", **kw))


def test_settings_are_the_tools_config():
    # One set of fields and defaults: the client reads tools.* of the config tree.
    c = ToolsConfig()
    assert (
        c.enabled,
        c.server_url,
        c.max_tool_turns,
        c.max_retries,
        c.retry_delay,
        c.timeout,
        c.max_workers,
        c.request_interval,
        c.max_body_bytes,
    ) == (False, None, 3, 3, 1.0, 30.0, 8, 0.0, 2 * 1024 * 1024)
    with pytest.raises(ConfigError) as err:
        ToolClient(ToolsConfig(server_url="ftp://x", timeout=0))
    assert err.value.problems == [
        "tools.server_url: must be http(s)://host:port, got 'ftp://x'",
        "tools.timeout: must be > 0, got 0",
    ]
    with pytest.raises(ValueError, match="tools.max_workers: must be > 0"):
        ToolClient(ToolsConfig(server_url="http://127.0.0.1:30003", max_workers=0))
    with pytest.raises(ValueError, match="tools.server_url: a tool client needs"):
        ToolClient(ToolsConfig())


def test_success(make_server):
    srv = make_server("ok")
    r = client_for(srv).execute("print('é')")
    assert r.ok and r.output == "print('é')" and r.error is None and srv.requests == 1


@pytest.mark.parametrize("status", ["502", "503", "504"])
def test_retries_gateway_errors_then_succeeds(make_server, status):
    srv = make_server(status, status, "ok")
    r = client_for(srv).execute("x")
    assert r.ok and srv.requests == 3


def test_retries_connection_reset_before_response(make_server):
    srv = make_server("reset", "ok")
    r = client_for(srv).execute("x")
    assert r.ok and srv.requests == 2


def test_gives_up_after_max_retries(make_server):
    srv = make_server("503")
    r = client_for(srv, max_retries=2).execute("x")
    assert not r.ok and srv.requests == 3
    assert "unavailable after 3 attempt(s)" in r.error and "HTTP 503" in r.error and "scripted 503" in r.error


@pytest.mark.parametrize("status", ["400", "404", "408", "413", "429", "500"])
def test_never_retries_4xx_or_500(make_server, status):
    srv = make_server(status, "ok")
    r = client_for(srv).execute("x")
    assert not r.ok and srv.requests == 1
    assert f"HTTP {status}" in r.error and f"scripted {status}" in r.error


def test_never_retries_a_returned_result(make_server):
    srv = make_server("failed-run", "ok")
    r = client_for(srv).execute("1/0")
    assert not r.ok and srv.requests == 1
    assert r.output == "Traceback\n" and r.error == "exited with code 1"


def test_bad_response_body_is_data(make_server):
    srv = make_server("garbage")
    r = client_for(srv).execute("x")
    assert not r.ok and "not JSON" in r.error and srv.requests == 1


def test_connection_refused_is_retried_then_reported():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens on port now
    c = ToolClient(
        ToolsConfig(server_url=f"http://127.0.0.1:{port}", retry_delay=0.01, max_retries=2, request_interval=0)
    )
    r = c.execute("x")
    assert not r.ok and "unavailable after 3 attempt(s)" in r.error and "cannot reach" in r.error
    assert c.health() is None


def test_deadline_waiting_for_an_answer_is_not_retried(make_server):
    srv = make_server("slow", "ok")
    r = client_for(srv, timeout=0.3).execute("x")
    assert not r.ok and "did not answer within 0.3 s" in r.error
    assert srv.requests == 1  # the code may be running: a retry would run it twice


def test_deadline_bounds_retries(make_server):
    srv = make_server("503")
    r = client_for(srv, timeout=1.0, retry_delay=0.2, max_retries=50).execute("x")
    assert not r.ok and "unavailable" in r.error
    assert srv.requests < 51  # the deadline, not max_retries, ended it


def test_large_output_truncated_with_marker(make_server):
    srv = make_server("big")
    r = client_for(srv, max_output_bytes=1000).execute("x")
    assert r.ok and r.output == "x" * 1000 + "\n...[truncated 99000 bytes]"


def test_truncate_respects_utf8():
    assert truncate("abc", 3) == "abc"
    assert truncate("é" * 4, 3) == "é\n...[truncated 5 bytes]"


def test_execute_batch_keeps_order(make_server):
    srv = make_server("ok")
    codes = [f"print({i})" for i in range(25)]
    results = client_for(srv, max_workers=8, request_interval=0.001).execute_batch(codes)
    assert [r.output for r in results] == codes and all(r.ok for r in results)
    assert sorted(srv.codes) == sorted(codes)
    assert client_for(srv).execute_batch([]) == []


def test_health(make_server):
    srv = make_server("ok")
    assert client_for(srv).health() is None  # the scripted server has no GET /health


def test_body_over_max_body_bytes_is_never_sent(make_server):
    srv = make_server("ok")
    client = client_for(srv, max_body_bytes=100)
    r = client.execute("x" * 200)
    assert not r.ok and srv.requests == 0
    assert r.error == "tool call not sent: its request body is 212 bytes, over tools.max_body_bytes (100)"
    assert client.execute("x" * 50).ok and srv.requests == 1  # 62 bytes: sent


def test_every_request_names_its_client(make_server):
    srv = make_server("ok")
    a, b = client_for(srv), client_for(srv)
    a.execute("1")
    a.execute("2")
    b.execute("3")
    assert srv.clients == [a.client_id, a.client_id, b.client_id] and a.client_id != b.client_id
