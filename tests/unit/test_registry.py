"""ToolRegistry: schemas derived from typed functions; bad calls come back as data."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal

import pytest

from relay.tools import sandbox
from relay.tools.calls import ToolCall
from relay.tools.registry import FunctionTool, PythonTool, RemoteHTTPTool, ToolRegistry, ToolResult, tool
from relay.tools.schema import function_schema, parse_docstring


def search(
    query: str,
    limit: int = 5,
    scale: float = 1.0,
    exact: bool = False,
    tags: list[str] | None = None,
    weights: dict[str, float] = {},  # noqa: B006 - the schema of a {} default
    mode: Literal["fast", "deep"] = "fast",
    pair: tuple[int, str] = (1, "a"),
    when: int | None = None,
    either: int | str = 0,
) -> str:
    """Search the corpus.

    Returns the best hits, one per line.

    Args:
        query: What to look for.
        limit (int): How many hits to return,
            at most 50.
        scale: Score multiplier.
        exact: Match whole words only.
        tags: Only documents with these tags.
        weights: Per-field weights.
        mode: Search strategy.
        pair: A fixed pair.
        when: A year, if any.
        either: Anything.

    Returns:
        The hits.
    """
    return f"{query}:{limit}"


def test_schema_openai_function_style():
    s = function_schema(search)
    assert s["type"] == "function"
    f = s["function"]
    assert f["name"] == "search"
    assert f["description"] == "Search the corpus.\n\nReturns the best hits, one per line."
    p = f["parameters"]
    assert p["type"] == "object" and p["required"] == ["query"]
    props = p["properties"]
    assert props["query"] == {"type": "string", "description": "What to look for."}
    assert props["limit"] == {"type": "integer", "description": "How many hits to return, at most 50.", "default": 5}
    assert props["scale"]["type"] == "number" and props["exact"]["type"] == "boolean"
    assert props["tags"] == {
        "type": ["array", "null"],
        "items": {"type": "string"},
        "description": "Only documents with these tags.",
        "default": None,
    }
    assert props["weights"]["type"] == "object" and props["weights"]["additionalProperties"] == {"type": "number"}
    assert props["mode"]["enum"] == ["fast", "deep"] and props["mode"]["type"] == "string"
    assert props["pair"]["prefixItems"] == [{"type": "integer"}, {"type": "string"}]
    assert props["when"]["type"] == ["integer", "null"]
    assert props["either"]["anyOf"] == [{"type": "integer"}, {"type": "string"}]
    json.dumps(s)  # serializable for the chat template


def test_docstring_parsing_google_style():
    desc, args = parse_docstring("""Do it.

    Args:
        x (int): first
            continued
        *rest: ignored style
    Raises:
        ValueError: never
    """)
    assert desc == "Do it." and args == {"x": "first continued", "rest": "ignored style"}
    assert parse_docstring(None) == ("", {})


def test_decorators_and_register():
    reg = ToolRegistry()

    @reg.tool
    def add(a: int, b: int = 0) -> int:
        """Add two integers."""
        return a + b

    @tool(name="mul", description="Multiply.")
    def times(a: float, b: float) -> float:
        return a * b

    reg.register(times)
    reg.register(lambda_free_fn, name="greet")
    assert isinstance(add, FunctionTool) and add(2, 3) == 5  # still callable as the function
    assert reg.names == ["add", "mul", "greet"] and "mul" in reg and len(reg) == 3
    assert [s["function"]["name"] for s in reg.schemas()] == ["add", "mul", "greet"]
    assert reg.schemas()[1]["function"]["description"] == "Multiply."
    with pytest.raises(ValueError, match="already registered"):
        reg.register(times)
    reg.register(times, replace=True)


def lambda_free_fn(name: str) -> str:
    """Say hello."""
    return f"hello {name}"


def test_registration_errors_are_loud():
    def untyped(x):
        return x

    def varargs(*xs: int):
        return xs

    def odd(x: set[bytes]):
        return x

    def int_keys(x: dict[int, str]):
        return x

    for fn, msg in [
        (untyped, "no type hint"),
        (varargs, r"\*xs"),
        (odd, "cannot describe"),
        (int_keys, "dict keys must be str"),
    ]:
        with pytest.raises(TypeError, match=msg):
            ToolRegistry([fn])


def test_call_success_and_output_as_text():
    reg = ToolRegistry([search])

    @reg.tool
    def stats(xs: list[float]) -> dict:
        """Mean of numbers."""
        return {"mean": sum(xs) / len(xs), "name": "é"}

    r = reg.call(ToolCall("search", {"query": "ray", "limit": 3}))
    assert r == ToolResult(True, "ray:3", None, r.seconds) and r.ok
    r = reg.call(ToolCall("stats", {"xs": [1, 2.5]}))
    assert r.ok and json.loads(r.output) == {"mean": 1.75, "name": "é"}


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({}, "tool 'search': missing required argument 'query'"),
        ({"query": "x", "colour": "red"}, "tool 'search': unexpected argument 'colour'"),
        ({"query": 3}, "tool 'search': argument 'query' must be string, got integer 3"),
        ({"query": "x", "limit": "5"}, "argument 'limit' must be integer, got string \"5\""),
        ({"query": "x", "limit": 2.5}, "argument 'limit' must be integer, got number 2.5"),
        ({"query": "x", "limit": True}, "argument 'limit' must be integer, got boolean true"),
        ({"query": "x", "exact": 1}, "argument 'exact' must be boolean"),
        ({"query": "x", "tags": ["a", 2]}, "argument 'tags'[1] must be string, got integer 2"),
        ({"query": "x", "weights": {"title": "high"}}, "argument 'weights'['title'] must be number"),
        ({"query": "x", "mode": "slow"}, 'argument \'mode\' must be one of ["fast", "deep"]'),
        ({"query": "x", "pair": [1]}, "argument 'pair' must have 2 items"),
        ({"query": "x", "either": 1.5}, "argument 'either' does not match any allowed type"),
        ([1, 2], "tool 'search': arguments must be a JSON object, got array"),
    ],
)
def test_bad_arguments_are_error_results(arguments, message):
    r = ToolRegistry([search]).call(ToolCall("search", arguments))
    assert not r.ok and r.output == "" and message in r.error, r.error


def test_valid_edge_values_pass():
    reg = ToolRegistry([search])
    for args in [
        {"query": "x", "scale": 2},
        {"query": "x", "tags": None},
        {"query": "x", "when": None},
        {"query": "x", "either": "s"},
        {"query": "", "weights": {}},
    ]:
        assert reg.call(ToolCall("search", args)).ok, args


def test_unknown_tool_and_raising_tool_are_data():
    reg = ToolRegistry()

    @reg.tool
    def boom(x: int) -> int:
        """Fails."""
        raise ValueError(f"bad x={x}")

    r = reg.call(ToolCall("nope", {}))
    assert not r.ok and r.error == "unknown tool 'nope'; available tools: 'boom'"
    r = reg.call(ToolCall("boom", {"x": 1}))
    assert not r.ok and r.error == "tool 'boom' raised ValueError: bad x=1"


def test_observation_text():
    assert ToolResult(True, "42\n").observation() == "42"
    assert (
        ToolResult(False, "Traceback...\n", "exited with code 1").observation()
        == "Traceback...\nError: exited with code 1"
    )
    assert ToolResult(False, "", "timed out").observation() == "Error: timed out"


def test_from_execution():
    r = ToolResult.from_execution(
        {"ok": False, "stdout": "a", "stderr": "b\n", "exit_code": 1, "error": "exited with code 1", "seconds": 0.5}
    )
    assert r == ToolResult(False, "a\nb\n", "exited with code 1", 0.5)
    assert ToolResult.from_execution({"ok": True, "stdout": "x", "stderr": "", "error": None}).ok


def test_python_tool_schema_and_limits_cannot_be_passed():
    seen = []

    def fake_execute(code: str) -> ToolResult:
        seen.append(code)
        return ToolResult(True, "ran")

    reg = ToolRegistry([PythonTool(fake_execute)])
    f = reg.schemas()[0]["function"]
    assert f["name"] == "python" and f["parameters"]["required"] == ["code"]
    assert reg.call(ToolCall("python", {"code": "print(1)"})).output == "ran"
    r = reg.call(ToolCall("python", {"code": "print(1)", "timeout": 99999}))
    assert not r.ok and "unexpected argument 'timeout'" in r.error
    assert seen == ["print(1)"]


class _Echo(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_POST(self):
        args = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if args.get("fail"):
            self.send_response(500)
            body = b"exploded"
        elif args.get("plain"):
            self.send_response(200)
            body = f"plain {args['plain']}".encode()
        else:
            self.send_response(200)
            body = json.dumps({"output": {"echo": args}}).encode()
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def echo_url():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/echo"
    srv.shutdown()
    srv.server_close()
    t.join()


def test_remote_http_tool(echo_url):
    params = {
        "type": "object",
        "properties": {"x": {"type": "integer"}, "fail": {"type": "boolean"}, "plain": {"type": "string"}},
        "required": [],
    }
    reg = ToolRegistry([RemoteHTTPTool("echo", echo_url, params, timeout=5, description="Echo.")])
    assert reg.schemas()[0]["function"] == {"name": "echo", "description": "Echo.", "parameters": params}
    r = reg.call(ToolCall("echo", {"x": 1}))
    assert r.ok and json.loads(r.output) == {"echo": {"x": 1}}
    assert reg.call(ToolCall("echo", {"plain": "é"})).output == "plain é"
    r = reg.call(ToolCall("echo", {"fail": True}))
    assert not r.ok and "HTTP 500" in r.error and "exploded" in r.error
    r = reg.call(ToolCall("echo", {"x": "one"}))  # validated before any request
    assert not r.ok and "argument 'x' must be integer" in r.error


def test_remote_http_tool_unreachable_is_data():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    t = RemoteHTTPTool("gone", f"http://127.0.0.1:{port}/x", {"type": "object", "properties": {}}, timeout=2)
    r = ToolRegistry([t]).call(ToolCall("gone", {}))
    assert not r.ok and "request failed" in r.error


def test_python_tool_unsandboxed_opt_out_is_loud():
    with pytest.warns(RuntimeWarning, match="WITHOUT A SANDBOX"):
        t = PythonTool.sandboxed(sandbox.SandboxConfig(wall_timeout_s=10), mode="none")
    r = ToolRegistry([t]).call(ToolCall("python", {"code": "print(6 * 7)"}))
    assert r.ok and r.output == "42\n"
    r = ToolRegistry([t]).call(ToolCall("python", {"code": "raise SystemExit(3)"}))
    assert not r.ok and r.error == "exited with code 3"


def test_bwrap_mode_refuses_with_what_is_missing(monkeypatch):
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    monkeypatch.setattr(sandbox, "_probe_cache", {})
    ok, why = sandbox.sandbox_available()
    assert not ok and "bubblewrap (bwrap) is not on PATH" in why
    assert "apt-get install bubblewrap" in why and "tools.sandbox=none" in why
    with pytest.raises(sandbox.SandboxUnavailable, match="apt-get install bubblewrap"):
        sandbox.make_runner("bwrap")
    with pytest.raises(sandbox.SandboxUnavailable):
        PythonTool.sandboxed(mode="bwrap")
    with pytest.raises(ValueError, match="unknown sandbox mode 'docker'"):
        sandbox.make_runner("docker")
    with pytest.raises(ValueError, match="wall_timeout_s: must be > 0"):
        sandbox.make_runner("none", sandbox.SandboxConfig(wall_timeout_s=0))
