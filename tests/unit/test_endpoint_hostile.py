"""The endpoint under hostile clients (relay/endpoint/connections.py, server.py): connections that
never finish a request are closed, open connections are capped without starving real requests,
the log stays short, slow parsing runs off the event loop, and hostile bytes get a 400 or a 401."""

from __future__ import annotations

import copy
import logging
import socket
import threading
import time

import httpx
import pytest

from relay.endpoint.server import EndpointServer
from relay.models.tokenizer import build_tiny_tokenizer
from tests.agent_scripts import EOS, QWEN_LIKE_TEMPLATE, ScriptedEngine

ASK = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
TOOLS = [{"type": "function", "function": {"name": "python", "parameters": {"type": "object"}}}]


def scripted(reply: str = "ok", parser: str = "hermes", **kwargs) -> EndpointServer:
    tok = copy.deepcopy(build_tiny_tokenizer())
    tok.chat_template = QWEN_LIKE_TEMPLATE
    engine = ScriptedEngine(tok, lambda turn, text: reply + EOS)
    return EndpointServer(engine, parser=parser, max_tokens=4096, max_total_tokens=8192, **kwargs)


@pytest.fixture(scope="module")
def server():
    srv = scripted(idle_timeout_s=0.5, body_timeout_s=0.5)
    yield srv
    srv.shutdown()


def auth(srv) -> dict:
    return {"Authorization": f"Bearer {srv.token}"}


def closed_within(sock: socket.socket, seconds: float) -> tuple[bool, bytes]:
    """Whether the server closed `sock` within `seconds`, and what it sent before."""
    sock.settimeout(seconds)
    got = b""
    try:
        while chunk := sock.recv(65536):
            got += chunk
        return True, got
    except TimeoutError:
        return False, got
    except ConnectionResetError:
        return True, got


@pytest.mark.parametrize(
    "sent",
    [
        b"",  # silent
        b"POST /v1/chat/comp",  # a request line cut short
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: app",  # headers that never end
    ],
    ids=["silent", "partial-line", "partial-headers"],
)
def test_a_connection_without_a_whole_request_head_is_closed(server, sent):
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(sent)
        closed, _ = closed_within(s, 5)
    assert closed


def test_headers_without_a_token_get_401_then_the_idle_connection_closes(server):
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        closed, got = closed_within(s, 5)
    assert closed and got.startswith(b"HTTP/1.1 401")


def test_a_body_that_stops_half_way_is_408(server):
    head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.token}\r\n"
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(head.encode() + b'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"model"')
        closed, got = closed_within(s, 5)
    assert closed and got.startswith(b"HTTP/1.1 408") and b'"error"' in got


def test_an_idle_keep_alive_connection_is_closed(server):
    head = f"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.token}\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(head.encode())
        closed, got = closed_within(s, 5)
    assert closed and got.startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize(
    "header", [b"Bearer \xff\xfe\x80", b"\xc3\x28 x", b"Bearer " + "é".encode("latin-1")], ids=["ff", "c328", "latin1"]
)
def test_authorization_bytes_that_are_not_utf8_are_401(server, header):
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: " + header + b"\r\n\r\n")
        _, got = closed_within(s, 5)
    assert got.startswith(b"HTTP/1.1 401"), got[:200]


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 50_000 + b"]" * 50_000,
        b'{"model": "m", "n": ' + b"9" * 1_000_000 + b"}",
        b"\xff\xfe{",
        b'{"a": 1e999999}',
    ],
    ids=["deep", "million-digits", "not-utf8", "huge-float"],
)
def test_hostile_json_is_400(server, body):
    r = httpx.post(f"{server.url}/v1/chat/completions", content=body, headers=auth(server), timeout=30)
    assert r.status_code == 400 and set(r.json()) == {"error"}, r.text[:300]


@pytest.mark.parametrize("arg", ["b'print(1)'", "1j", "{1, 2}"])
def test_a_reply_with_arguments_json_cannot_carry_is_text_not_a_500(arg):
    srv = scripted(f"[python(code={arg})]", parser="function_call")
    try:
        r = httpx.post(f"{srv.url}/v1/chat/completions", json={**ASK, "tools": TOOLS}, headers=auth(srv), timeout=30)
    finally:
        srv.shutdown()
    assert r.status_code == 200, r.text
    message = r.json()["choices"][0]["message"]
    assert not message.get("tool_calls") and message["content"] == f"[python(code={arg})]"


def test_a_slow_parse_does_not_hold_up_other_clients():
    srv = scripted('<tool_call>{"name": "python", "arguments": {}}</tool_call>')
    real = srv.parser.parse
    srv.parser.parse = lambda text: (time.sleep(2.0), real(text))[1]  # a parse that takes 2 s
    try:
        slow = threading.Thread(
            target=httpx.post,
            args=(f"{srv.url}/v1/chat/completions",),
            kwargs=dict(json={**ASK, "tools": TOOLS}, headers=auth(srv), timeout=30),
        )
        slow.start()
        time.sleep(0.3)
        t0 = time.perf_counter()
        plain = httpx.post(f"{srv.url}/v1/chat/completions", json=ASK, headers=auth(srv), timeout=30)
        waited = time.perf_counter() - t0
        slow.join()
    finally:
        srv.shutdown()
    assert plain.status_code == 200 and waited < 1.0, waited


def test_idle_connections_over_the_cap_make_room_and_the_log_stays_short(caplog):
    # 2,000 idle connections from one peer against caps of 1024 open and 512 per peer: each one past
    # the cap takes the place of the oldest idle one, so a real request still gets in at once.
    srv = scripted(idle_timeout_s=60)
    held: list[socket.socket] = []
    try:
        with caplog.at_level(logging.INFO, logger="relay.endpoint"):
            for _ in range(2000):
                held.append(socket.create_connection(("127.0.0.1", srv.port)))
            time.sleep(0.5)  # the server has seen them all
            with httpx.Client(headers=auth(srv), timeout=10) as client:
                client.get(f"{srv.url}/v1/models")  # connect once
                seconds = []
                for _ in range(20):
                    t0 = time.perf_counter()
                    r = client.post(f"{srv.url}/v1/chat/completions", json=ASK)
                    seconds.append(time.perf_counter() - t0)
                    assert r.status_code == 200
            fresh = [time.perf_counter()]
            r = httpx.get(f"{srv.url}/v1/models", headers=auth(srv), timeout=10)  # a new connection
            fresh.append(time.perf_counter())
        assert r.status_code == 200 and fresh[1] - fresh[0] < 0.5
        assert sorted(seconds)[len(seconds) // 2] < 0.1, seconds
        assert len(srv.gate.open) <= 512
        lines = [rec for rec in caplog.records if rec.name == "relay.endpoint"]
        assert 1 <= len(lines) < 100
    finally:
        for s in held:
            s.close()
        srv.shutdown()


def test_past_the_cap_with_every_connection_busy_is_a_503():
    srv = scripted(max_connections=4, max_connections_per_peer=4, body_timeout_s=5)
    held = []
    try:
        head = f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {srv.token}\r\n"
        for _ in range(4):  # busy: a request whose body is still coming
            s = socket.create_connection(("127.0.0.1", srv.port))
            s.sendall(head.encode() + b"Content-Length: 100\r\n\r\n{")
            held.append(s)
        time.sleep(0.3)
        with socket.create_connection(("127.0.0.1", srv.port)) as s:
            closed, got = closed_within(s, 5)
        assert closed and got.startswith(b"HTTP/1.1 503") and b"too many open connections" in got
    finally:
        for s in held:
            s.close()
        srv.shutdown()


def test_the_limits_are_checked_with_the_config():
    from relay.config import ConfigError, load_config

    with pytest.raises(ConfigError) as e:
        load_config(None, ["endpoint.enabled=true", "endpoint.idle_timeout_s=0", "endpoint.max_connections=0"])
    assert "endpoint.idle_timeout_s" in str(e.value) and "endpoint.max_connections" in str(e.value)
