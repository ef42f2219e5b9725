"""Tools the model may call: typed Python functions, remote HTTP tools, and the sandboxed `python` tool.

    registry = ToolRegistry()

    @registry.tool
    def add(a: int, b: int = 0) -> int:
        '''Add two integers.

        Args:
            a: The first addend.
            b: The second addend.
        '''
        return a + b

    tokenizer.apply_chat_template(messages, tools=registry.schemas())   # OpenAI function schemas
    result = registry.call(ToolCall("add", {"a": 1, "b": 2}))           # ToolResult(ok=True, output="3")

A function's JSON schema is derived from its signature, type hints and Google-style docstring
(relay.tools.schema). `call` validates the arguments against that schema first; an unknown tool,
a missing, extra or wrongly typed argument, or an exception inside the tool comes back as
ToolResult(ok=False, error=...) naming the tool and the argument, for the model to read.
Registering a function the schema cannot describe (no type hints, *args) is a programming error
and raises at once.
"""

from __future__ import annotations

import json
import logging
import re
import time
import typing
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from relay.tools.calls import ToolCall
from relay.tools.schema import function_schema, validate_arguments

log = logging.getLogger(__name__)


@dataclass
class ToolResult:
    ok: bool
    output: str
    error: str | None = None
    seconds: float = 0.0

    def observation(self) -> str:
        """The text the model sees: the output, then the error line if any."""
        parts = [self.output.rstrip("\n")] if self.output else []
        if self.error:
            parts.append(f"Error: {self.error}")
        return "\n".join(parts)

    @classmethod
    def from_execution(cls, d: Mapping[str, Any], seconds: float | None = None) -> ToolResult:
        """From a code run (the tool server's JSON, or SandboxResult.to_json()): stdout, then stderr."""
        out, err = d.get("stdout") or "", d.get("stderr") or ""
        output = out + ("\n" if out and err and not out.endswith("\n") else "") + err
        ok = bool(d.get("ok", d.get("exit_code") == 0 and not d.get("timed_out")))
        error = d.get("error") or (None if ok else "the code did not finish successfully")
        return cls(
            ok=ok,
            output=output,
            error=None if ok else error,
            seconds=float(d.get("seconds", 0.0) if seconds is None else seconds),
        )


class Tool(Protocol):
    """Anything the registry can hold: a name, an OpenAI function schema, and invoke()."""

    name: str

    def schema(self) -> dict: ...

    def invoke(self, arguments: dict[str, Any]) -> ToolResult: ...


def _to_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


# ----------------------------------------------------------------------------------- tools


class FunctionTool:
    """A typed Python function as a tool. Calling the object calls the function."""

    def __init__(self, fn: Callable, name: str | None = None, description: str | None = None):
        self.fn = fn
        self.name = name or fn.__name__
        self._schema = function_schema(fn, self.name, description)
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    def schema(self) -> dict:
        return self._schema

    def invoke(self, arguments: dict[str, Any]) -> ToolResult:
        t0 = time.monotonic()
        try:
            value = self.fn(**arguments)
        except Exception as e:  # the tool failed on this input: data for the model, logged for us
            log.info("tool %s raised %s: %s", self.name, type(e).__name__, e)
            return ToolResult(False, "", f"tool {self.name!r} raised {type(e).__name__}: {e}", time.monotonic() - t0)
        return ToolResult(True, _to_text(value), None, time.monotonic() - t0)

    def __repr__(self) -> str:
        return f"FunctionTool({self.name!r})"


def tool(fn: Callable | None = None, *, name: str | None = None, description: str | None = None):
    """Decorator: make a typed function a FunctionTool (register it with ToolRegistry([...]) or .register)."""
    if fn is None:
        return lambda f: FunctionTool(f, name, description)
    return FunctionTool(fn, name, description)


class RemoteHTTPTool:
    """A tool served over HTTP: POST url with the arguments as a JSON object.

    The response is the tool's output: a JSON object {"output": ..., "error": ...} is read as
    such, any other body is the output text. Non-2xx answers and network failures are errors.
    `schema` is an OpenAI function schema, or just its "parameters" object.
    """

    def __init__(
        self,
        name: str,
        url: str,
        schema: dict,
        timeout: float = 30.0,
        description: str = "",
        headers: Mapping[str, str] | None = None,
        max_response_bytes: int = 1 << 20,
    ):
        self.name, self.url, self.timeout = name, url, timeout
        self.headers = dict(headers or {})
        self.max_response_bytes = max_response_bytes
        if schema.get("type") == "function":
            self._schema = json.loads(json.dumps(schema))
            self._schema["function"]["name"] = name
        else:
            self._schema = {
                "type": "function",
                "function": {"name": name, "description": description, "parameters": schema},
            }

    def schema(self) -> dict:
        return self._schema

    def invoke(self, arguments: dict[str, Any]) -> ToolResult:
        t0 = time.monotonic()
        req = urllib.request.Request(
            self.url,
            data=json.dumps(arguments).encode(),
            method="POST",
            headers={"Content-Type": "application/json", **self.headers},
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                body = resp.read(self.max_response_bytes + 1)
                ctype = resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            detail = e.read(500).decode("utf-8", "replace").strip()
            return ToolResult(
                False,
                "",
                f"tool {self.name!r}: HTTP {e.code} {e.reason}" + (f": {detail}" if detail else ""),
                time.monotonic() - t0,
            )
        except (urllib.error.URLError, OSError, ValueError) as e:
            reason = getattr(e, "reason", e)
            return ToolResult(False, "", f"tool {self.name!r}: request failed: {reason}", time.monotonic() - t0)
        truncated = len(body) > self.max_response_bytes
        text = body[: self.max_response_bytes].decode("utf-8", "replace")
        seconds = time.monotonic() - t0
        if "json" in ctype and not truncated:
            try:
                data = json.loads(text)
            except json.JSONDecodeError:
                data = None
            if isinstance(data, dict) and ("output" in data or "error" in data):
                err = data.get("error")
                return ToolResult(
                    not err and data.get("ok", True) is not False,
                    _to_text(data.get("output")),
                    _to_text(err) or None,
                    seconds,
                )
        if truncated:
            text += "\n...[truncated]"
        return ToolResult(True, text, None, seconds)

    def __repr__(self) -> str:
        return f"RemoteHTTPTool({self.name!r}, {self.url!r})"


PYTHON_TOOL_DESCRIPTION = (
    "Run a Python 3 program in an isolated sandbox and return what it prints (stdout, then stderr). "
    "No network, no third-party packages, limited time and memory; print the values you need."
)


class PythonTool:
    """The built-in `python` tool: {"code": "..."} runs in the sandbox or on the tool server.

    `execute(code) -> ToolResult` does the work; see `sandboxed` and `remote`. Only the code
    string is passed on: limits come from the sandbox / server configuration, and any other
    argument a model adds (e.g. "timeout": 99999) is rejected by the registry's validation.
    """

    name = "python"

    def __init__(
        self, execute: Callable[[str], ToolResult], name: str = "python", description: str = PYTHON_TOOL_DESCRIPTION
    ):
        self.execute, self.name = execute, name
        self._schema = {
            "type": "function",
            "function": {
                "name": name,
                "description": description,
                "parameters": {
                    "type": "object",
                    "properties": {"code": {"type": "string", "description": "The Python program to run."}},
                    "required": ["code"],
                },
            },
        }

    @classmethod
    def sandboxed(cls, cfg=None, mode: str = "bwrap", **kwargs) -> PythonTool:
        """Runs code in this process's sandbox (relay.tools.sandbox); refuses where it cannot be built."""
        from relay.tools.sandbox import make_runner

        run = make_runner(mode, cfg)
        return cls(lambda code: ToolResult.from_execution(run(code).to_json()), **kwargs)

    @classmethod
    def remote(cls, client, **kwargs) -> PythonTool:
        """Sends code to a tool server through a relay.tools.client.ToolClient."""
        return cls(client.execute, **kwargs)

    def schema(self) -> dict:
        return self._schema

    def invoke(self, arguments: dict[str, Any]) -> ToolResult:
        return self.execute(arguments["code"])

    def __repr__(self) -> str:
        return f"PythonTool({self.name!r})"


class ToolRegistry:
    """Tools by name; their schemas for the chat template; validated calls that never raise."""

    def __init__(self, tools: typing.Iterable[Tool | Callable] = ()):
        self._tools: dict[str, Tool] = {}
        for t in tools:
            self.register(t)

    def register(
        self,
        fn_or_tool: Tool | Callable,
        *,
        name: str | None = None,
        description: str | None = None,
        replace: bool = False,
    ):
        """Add a tool (a FunctionTool, RemoteHTTPTool, PythonTool) or a typed function; returns it,
        so it also works as a decorator."""
        if hasattr(fn_or_tool, "invoke") and hasattr(fn_or_tool, "schema"):
            t = fn_or_tool
            if name or description:
                raise TypeError("name/description apply to plain functions; set them on the tool object")
        elif callable(fn_or_tool):
            t = FunctionTool(fn_or_tool, name, description)
        else:
            raise TypeError(f"cannot register {fn_or_tool!r}: expected a function or a tool object")
        if not re.fullmatch(r"[A-Za-z_][\w.-]*", t.name):
            raise ValueError(f"invalid tool name {t.name!r}")
        if t.name in self._tools and not replace:
            raise ValueError(f"tool {t.name!r} is already registered (pass replace=True)")
        self._tools[t.name] = t
        return fn_or_tool

    def tool(self, fn: Callable | None = None, *, name: str | None = None, description: str | None = None):
        """Decorator: register a typed function (returns it wrapped as a FunctionTool)."""

        def deco(f: Callable) -> FunctionTool:
            t = FunctionTool(f, name, description)
            self.register(t)
            return t

        return deco if fn is None else deco(fn)

    def schemas(self) -> list[dict]:
        """OpenAI function schemas, for `apply_chat_template(..., tools=registry.schemas())`."""
        return [t.schema() for t in self._tools.values()]

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def execute_tool(self, name: str, **arguments: Any) -> tuple[bool, str]:
        """Run one tool by name with keyword arguments: (success, its output, or the error line)."""
        result = self.call(ToolCall(name, arguments))
        return result.ok, result.output if result.ok else (result.error or "")

    def call(self, call: ToolCall) -> ToolResult:
        """Validate and run one call. Every failure is a ToolResult(ok=False, error=...)."""
        t0 = time.monotonic()
        try:
            t = self._tools.get(call.name) if isinstance(call.name, str) else None
            if t is None:
                known = ", ".join(map(repr, self._tools)) or "none"
                return ToolResult(False, "", f"unknown tool {call.name!r}; available tools: {known}", 0.0)
            params = t.schema().get("function", {}).get("parameters", {"type": "object", "properties": {}})
            if err := validate_arguments(call.name, call.arguments, params):
                return ToolResult(False, "", err, time.monotonic() - t0)
            return t.invoke(call.arguments)
        except Exception as e:
            # Hostile arguments (nesting past the recursion limit while validating, keys that are no
            # identifiers) or a tool object that broke its never-raise contract: the rollout goes on.
            log.exception("tool call %r failed", call.name)
            reason = f"{type(e).__name__}: {e}"
            return ToolResult(False, "", f"tool {call.name!r} failed: {reason[:500]}", time.monotonic() - t0)
