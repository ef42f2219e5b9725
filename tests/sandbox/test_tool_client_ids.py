"""The tool server's client ids are authenticated: a claimed id counts only when it is signed with
the run's secret (relay/tools/client_auth.py); anything else is counted by its peer address.

The server is real (ToolServer on 127.0.0.1), the sandbox a stand-in: code starting with "block"
waits for a gate, so the tests hold slots and places in line without timing anything.
"""

from __future__ import annotations

import http.client
import json
import threading
import time

import pytest

from relay.config import ToolsConfig, ToolServerConfig
from relay.tools.client import ToolClient
from relay.tools.client_auth import CLIENT_HEADER, SECRET_ENV, SIGNATURE_HEADER, client_key, secret_from_env, sign
from relay.tools.sandbox import SandboxResult
from relay.tools.server import ToolServer

SECRET = b"the run's secret, 16+ characters"


class Runner:
    def __init__(self):
        self.ran: list[str] = []
        self.gate = threading.Event()

    def __call__(self, code: str) -> SandboxResult:
        self.ran.append(code)
        if code.startswith("block"):
            self.gate.wait(30)
        return SandboxResult(code, "", 0)


@pytest.fixture
def serve():
    made = []

    def make(secret: bytes | None = SECRET, **kw) -> tuple[ToolServer, Runner]:
        runner = Runner()
        server = ToolServer(ToolServerConfig(port=0, **kw), runner=runner, secret=secret or b"").start()
        made.append((server, runner))
        return server, runner

    yield make
    for server, runner in made:
        runner.gate.set()
        server.stop()


def post(server: ToolServer, code: str, headers: dict[str, str]) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.request("POST", "/execute", json.dumps({"code": code}), headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def as_client(client: str, secret: bytes | None = None) -> dict[str, str]:
    headers = {CLIENT_HEADER: client}
    if secret:
        headers[SIGNATURE_HEADER] = sign(secret, client)
    return headers


def in_background(server: ToolServer, code: str, headers: dict[str, str], out: list) -> threading.Thread:
    t = threading.Thread(target=lambda: out.append(post(server, code, headers)))
    t.start()
    return t


def wait_for(server: ToolServer, **counts) -> None:
    end = time.monotonic() + 20
    while any(server.health()[k] != v for k, v in counts.items()):
        assert time.monotonic() < end, (server.health(), counts)
        time.sleep(0.01)


def test_a_spoofed_id_does_not_take_the_real_clients_places(serve):
    server, runner = serve(max_concurrency=1, max_waiting_per_client=2)
    out: list = []
    # The spoofer claims worker-7 without its signature: one running, two waiting, then 429s.
    spoofed = [in_background(server, f"block-spoof{i}", as_client("worker-7"), out) for i in range(3)]
    wait_for(server, running=1, waiting=2)
    assert post(server, "block-spoof3", as_client("worker-7"))[0] == 429
    assert post(server, "block-forged", {**as_client("worker-7"), SIGNATURE_HEADER: "0" * 64})[0] == 429
    # The real worker-7 still has both of its places, and its call runs next (least recently served).
    real = [in_background(server, f"real{i}", as_client("worker-7", SECRET), out) for i in range(2)]
    wait_for(server, waiting=4, clients=2)
    runner.gate.set()
    for t in [*spoofed, *real]:
        t.join()
    assert sorted(status for status, _ in out) == [200] * 5
    # which of a client's own concurrent calls came first is the threads' race; whose call runs next is not
    assert runner.ran[0].startswith("block-spoof") and runner.ran[1].startswith("real"), runner.ran
    h = server.health()
    assert h["client_ids"] == "signed" and h["requests_by_id"] == 2 and h["requests_by_peer"] == 5


def test_fresh_ids_from_one_peer_share_one_line(serve):
    server, runner = serve(max_concurrency=1, max_waiting_per_client=2)
    out: list = []
    threads = [in_background(server, f"block-{i}", as_client(f"fresh-{i}"), out) for i in range(3)]
    wait_for(server, running=1, waiting=2, clients=1)  # three ids, one client: the peer
    status, reply = post(server, "one more", as_client("fresh-3"))
    assert status == 429 and "for this client" in reply["error"]
    status, reply = post(server, "no id at all", {})
    assert status == 429 and "for this client" in reply["error"]
    runner.gate.set()
    for t in threads:
        t.join()
    assert [s for s, _ in out] == [200] * 3 and len(runner.ran) == 3


def test_a_signed_id_from_the_real_client_works(serve, monkeypatch):
    server, runner = serve()
    url = server.url
    assert ToolClient(ToolsConfig(server_url=url, request_interval=0), secret=SECRET).execute("print(1)").ok
    monkeypatch.setenv(SECRET_ENV, SECRET.decode())  # how a rollout worker's client gets it
    client = ToolClient(ToolsConfig(server_url=url, request_interval=0))
    assert client.execute("print(2)").ok
    assert server.health()["requests_by_id"] == 2 and server.health()["requests_by_peer"] == 0
    monkeypatch.setenv(SECRET_ENV, "another secret of 16+ characters")  # the wrong secret: by address
    assert ToolClient(ToolsConfig(server_url=url, request_interval=0)).execute("print(3)").ok
    assert server.health()["requests_by_peer"] == 1
    assert runner.ran == ["print(1)", "print(2)", "print(3)"]


def test_without_a_secret_every_client_is_its_peer(serve):
    server, runner = serve(secret=None)
    assert post(server, "x", as_client("worker-7", SECRET))[0] == 200
    h = server.health()
    assert h["client_ids"] == "by peer address" and h["requests_by_peer"] == 1 and h["requests_by_id"] == 0


def test_keys_and_secrets():
    good = sign(SECRET, "worker-7")
    assert client_key("worker-7", good, "10.0.0.9", SECRET) == ("id:worker-7", True)
    assert client_key("worker-7", good.upper(), "10.0.0.9", SECRET) == ("peer:10.0.0.9", False)
    assert client_key("worker-8", good, "10.0.0.9", SECRET) == ("peer:10.0.0.9", False)  # not its id's MAC
    assert client_key("worker-7", good, "10.0.0.9", None) == ("peer:10.0.0.9", False)
    assert client_key("peer:10.0.0.1", sign(SECRET, "peer:10.0.0.1"), "h", SECRET)[0] == "id:peer:10.0.0.1"
    assert client_key("\x00bad", sign(SECRET, "\x00bad"), "h", SECRET) == ("peer:h", False)  # not printable


def test_a_short_secret_is_refused(monkeypatch):
    monkeypatch.setenv(SECRET_ENV, "short")
    with pytest.raises(ValueError, match="at least 16"):
        secret_from_env()
    monkeypatch.setenv(SECRET_ENV, "")
    assert secret_from_env() is None
