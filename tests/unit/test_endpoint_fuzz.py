"""No input gets a 500 from the endpoint: requests drawn from OpenAI's request schema with values of
every JSON type in every field, hostile bodies and headers. A bad request is a 400 (401 without the
token, 404 for an unknown episode), each one JSON line {"error": {...}}."""

from __future__ import annotations

import json
import socket

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.test_endpoint_hostile import scripted

FIELDS = (
    "model n temperature top_p max_tokens max_completion_tokens stop seed stream frequency_penalty "
    "presence_penalty user messages tools tool_choice parallel_tool_calls logprobs top_logprobs prompt echo"
).split()
ROLES = ["system", "developer", "user", "assistant", "tool", "bogus"]

leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
)
any_json = st.recursive(
    leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
call = st.fixed_dictionaries(
    {"id": st.text(max_size=8), "type": st.just("function")},
    optional={
        "function": st.fixed_dictionaries(
            {"name": st.text(max_size=8) | any_json}, optional={"arguments": st.text(max_size=30) | any_json}
        )
    },
)
message = st.fixed_dictionaries(
    {"role": st.sampled_from(ROLES)},
    optional={
        "content": st.text(max_size=60)
        | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=20)}), max_size=3)
        | any_json,
        "tool_calls": st.lists(call, max_size=3),
        "tool_call_id": st.text(max_size=8),
        "name": any_json,
    },
)
tool = st.fixed_dictionaries(
    {"type": st.sampled_from(["function", "x"])},
    optional={"function": st.fixed_dictionaries({"name": st.text(max_size=8)}, optional={"parameters": any_json})},
)
values = {
    "messages": st.lists(message, max_size=4) | any_json,
    "tools": st.lists(tool, max_size=2) | any_json,
    "prompt": st.text(max_size=60) | st.lists(st.integers(-5, 300), max_size=20) | any_json,
    "n": st.integers(-2, 4) | any_json,
    "max_tokens": st.integers(-2, 2**40) | any_json,
    "seed": st.integers(-(2**80), 2**80) | any_json,
    "stop": st.text(max_size=5) | st.lists(st.text(max_size=5), max_size=10) | any_json,
    "temperature": st.floats(-1, 3) | any_json,
}
request = st.dictionaries(st.sampled_from(FIELDS), any_json, max_size=6).flatmap(
    lambda d: st.fixed_dictionaries({k: values.get(k, any_json) for k in d})
)
ROUTES = ["/v1/chat/completions", "/v1/completions", "/v1/models", "/episodes/nope/v1/chat/completions", "/v1/x"]


@pytest.fixture(scope="module")
def server():
    srv = scripted('<tool_call>{"name": "python", "arguments": {"code": "1"}}</tool_call> [f(a=b"1")]')
    yield srv
    srv.shutdown()


def check(r: httpx.Response) -> None:
    assert r.status_code != 500 and r.status_code < 500, r.text[:300]
    if r.status_code != 200:
        body = r.json()
        assert set(body) == {"error"} and isinstance(body["error"]["message"], str), body


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(body=request, route=st.sampled_from(ROUTES[:2]))
def test_requests_of_the_schema_never_500(server, body, route):
    headers = {"Authorization": f"Bearer {server.token}"}
    check(httpx.post(server.url + route, content=json.dumps(body), headers=headers, timeout=30))


def raw_post(srv, route: str, headers: bytes, body: bytes) -> tuple[int, bytes]:
    """One request written byte for byte (an HTTP client refuses to send such header bytes)."""
    head = b"POST %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%sContent-Length: %d\r\n\r\n"
    with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as s:
        s.sendall(head % (route.encode(), headers, len(body)) + body)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    status = int(got.split(b" ", 2)[1])
    return status, got.partition(b"\r\n\r\n")[2]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    body=st.binary(max_size=300),
    route=st.sampled_from(ROUTES),
    key=st.binary(max_size=40).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b"")),
    with_token=st.booleans(),
)
def test_hostile_bytes_never_500(server, body, route, key, with_token):
    headers = b"Authorization: Bearer " + (server.token.encode() if with_token else key) + b"\r\n"
    status, reply = raw_post(server, route, headers, body)
    assert status < 500, reply[:300]
    if status != 200:
        error = json.loads(reply)
        assert set(error) == {"error"} and isinstance(error["error"]["message"], str), error
