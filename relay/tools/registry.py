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

A function's JSON schema is derived from its signature, type hints and Google-style docstring.
`call` validates the arguments against that schema first; an unknown tool, a missing, extra or
wrongly typed argument, or an exception inside the tool comes back as ToolResult(ok=False,
error=...) naming the tool and the argument, for the model to read. Registering a function the
schema cannot describe (no type hints, *args) is a programming error and raises at once.
"""
from __future__ import annotations

import inspect
import json
import logging
import re
import time
import types
import typing
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping, Protocol, Union

from relay.tools.parsers import ToolCall

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
    def from_execution(cls, d: Mapping[str, Any], seconds: float | None = None) -> "ToolResult":
        """From a code run (the tool server's JSON, or SandboxResult.to_json()): stdout, then stderr."""
        out, err = d.get("stdout") or "", d.get("stderr") or ""
        output = out + ("\n" if out and err and not out.endswith("\n") else "") + err
        ok = bool(d.get("ok", d.get("exit_code") == 0 and not d.get("timed_out")))
        error = d.get("error") or (None if ok else "the code did not finish successfully")
        return cls(ok=ok, output=output, error=None if ok else error,
                   seconds=float(d.get("seconds", 0.0) if seconds is None else seconds))


class Tool(Protocol):
    """Anything the registry can hold: a name, an OpenAI function schema, and invoke()."""

    name: str

    def schema(self) -> dict: ...

    def invoke(self, arguments: dict[str, Any]) -> ToolResult: ...


# ----------------------------------------------------------------------------------- schemas

_SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean"}
_NONE = type(None)


def type_schema(tp: Any) -> dict:
    """JSON schema of a type hint: int, float, str, bool, list[...], tuple[...], dict[str, ...],
    Optional / X | None, Union, Literal, Any. Raises TypeError for anything else."""
    if tp is Any:
        return {}
    if tp in _SIMPLE:
        return {"type": _SIMPLE[tp]}
    if tp is _NONE:
        return {"type": "null"}
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp in (list, tuple, set, frozenset) or origin in (list, set, frozenset):
        return {"type": "array", "items": type_schema(args[0])} if args else {"type": "array"}
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": type_schema(args[0])}
        return {"type": "array", "prefixItems": [type_schema(a) for a in args],
                "minItems": len(args), "maxItems": len(args)}
    if tp is dict or origin is dict:
        if args and args[0] is not str:
            raise TypeError(f"dict keys must be str in a tool signature (JSON objects), got {tp!r}")
        return {"type": "object", "additionalProperties": type_schema(args[1])} if args else {"type": "object"}
    if origin is Literal:
        values = list(args)
        kinds = {_SIMPLE.get(type(v)) for v in values}
        if None in kinds:
            raise TypeError(f"Literal values must be str, int, float or bool, got {tp!r}")
        return {"type": kinds.pop(), "enum": values} if len(kinds) == 1 else {"enum": values}
    if origin in (Union, types.UnionType):
        non_none = [a for a in args if a is not _NONE]
        inner = type_schema(non_none[0]) if len(non_none) == 1 else {"anyOf": [type_schema(a) for a in non_none]}
        if len(non_none) == len(args):
            return inner
        if isinstance(inner.get("type"), str):  # Optional[int] -> {"type": ["integer", "null"]}
            out = dict(inner, type=[inner["type"], "null"])
            if "enum" in out:
                out["enum"] = out["enum"] + [None]
            return out
        return {"anyOf": (inner["anyOf"] if "anyOf" in inner else [inner]) + [{"type": "null"}]}
    raise TypeError(f"cannot describe {tp!r} in a tool schema; use int, float, str, bool, list, dict, "
                    "Optional, Union or Literal")


_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Returns|Return|Raises|Yields|Examples?|Notes?)\s*:\s*$")
_ARG_LINE = re.compile(r"^\s*\*{0,2}(\w+)\s*(?:\(([^)]*)\))?\s*:\s*(.*)$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Google-style docstring -> (description, {argument: description})."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    desc, args, section, current, indent = [], {}, None, None, None
    for line in lines:
        m = _SECTION.match(line)
        if m:
            section, current, indent = m.group(1), None, None
            continue
        if section is None:
            desc.append(line)
        elif section in ("Args", "Arguments", "Parameters"):
            if not line.strip():
                continue
            lead = len(line) - len(line.lstrip())
            am = _ARG_LINE.match(line)
            if am and (indent is None or lead <= indent):
                indent, current = lead, am.group(1)
                args[current] = am.group(3).strip()
            elif current is not None:  # continuation line
                args[current] = (args[current] + " " + line.strip()).strip()
    description = "\n".join(desc).strip()
    return description, args


def function_schema(fn: Callable, name: str | None = None, description: str | None = None) -> dict:
    """OpenAI function-calling schema of a typed function."""
    name = name or fn.__name__
    doc_desc, arg_docs = parse_docstring(inspect.getdoc(fn))
    try:
        hints = typing.get_type_hints(fn)
    except Exception as e:  # an unresolvable forward reference
        raise TypeError(f"tool {name!r}: cannot resolve type hints: {e}") from e
    props, required = {}, []
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(f"tool {name!r}: *{p.name} / **{p.name} cannot be described by a JSON schema")
        if p.kind is p.POSITIONAL_ONLY:
            raise TypeError(f"tool {name!r}: positional-only parameter {p.name!r}; tools take keyword arguments")
        if p.name not in hints:
            raise TypeError(f"tool {name!r}: parameter {p.name!r} has no type hint")
        try:
            prop = type_schema(hints[p.name])
        except TypeError as e:
            raise TypeError(f"tool {name!r}, parameter {p.name!r}: {e}") from None
        if p.name in arg_docs and arg_docs[p.name]:
            prop["description"] = arg_docs[p.name]
        if p.default is p.empty:
            required.append(p.name)
        elif p.default is None or isinstance(p.default, (str, int, float, bool, list, dict)):
            prop["default"] = p.default
        props[p.name] = prop
    params: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        params["required"] = required
    return {"type": "function",
            "function": {"name": name, "description": description or doc_desc, "parameters": params}}


# ----------------------------------------------------------------------------------- validation

_JSON_TYPES = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "array": lambda v: isinstance(v, (list, tuple)),
    "object": lambda v: isinstance(v, dict),
}


def _describe_value(v: Any) -> str:
    kind = {str: "string", bool: "boolean", int: "integer", float: "number", list: "array",
            dict: "object", type(None): "null"}.get(type(v), type(v).__name__)
    text = json.dumps(v, ensure_ascii=False, default=str)
    return f"{kind} {text if len(text) <= 40 else text[:37] + '...'}"


def validate(value: Any, schema: dict, path: str) -> str | None:
    """The first violation of a JSON schema (the subset tool schemas use), or None."""
    if "anyOf" in schema:
        if any(validate(value, s, path) is None for s in schema["anyOf"]):
            return None
        return f"{path} does not match any allowed type, got {_describe_value(value)}"
    if "enum" in schema and value not in schema["enum"]:
        # bool == int in Python: True would pass an enum of [1]; check types too.
        return f"{path} must be one of {json.dumps(schema['enum'], ensure_ascii=False)}, got {_describe_value(value)}"
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        if not any(_JSON_TYPES.get(k, lambda v: True)(value) for k in kinds):
            return f"{path} must be {' or '.join(kinds)}, got {_describe_value(value)}"
    if isinstance(value, dict) and ("properties" in schema or "additionalProperties" in schema):
        props = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                return f"{path}: missing required key {key!r}"
        for key, v in value.items():
            if key in props:
                err = validate(v, props[key], f"{path}[{key!r}]")
            elif isinstance(schema.get("additionalProperties"), dict):
                err = validate(v, schema["additionalProperties"], f"{path}[{key!r}]")
            elif schema.get("additionalProperties") is False:
                err = f"{path}: unexpected key {key!r}"
            else:
                err = None
            if err:
                return err
    if isinstance(value, (list, tuple)):
        if "prefixItems" in schema:
            if len(value) != len(schema["prefixItems"]):
                return f"{path} must have {len(schema['prefixItems'])} items, got {len(value)}"
            for i, (v, s) in enumerate(zip(value, schema["prefixItems"])):
                if err := validate(v, s, f"{path}[{i}]"):
                    return err
        elif "items" in schema:
            for i, v in enumerate(value):
                if err := validate(v, schema["items"], f"{path}[{i}]"):
                    return err
    return None


def validate_arguments(tool_name: str, arguments: Any, parameters: dict) -> str | None:
    """Check a call's arguments against the tool's parameters schema; a message for the model, or None."""
    if not isinstance(arguments, dict):
        return f"tool {tool_name!r}: arguments must be a JSON object, got {_describe_value(arguments)}"
    props = parameters.get("properties", {})
    missing = [k for k in parameters.get("required", []) if k not in arguments]
    if missing:
        return f"tool {tool_name!r}: missing required argument {missing[0]!r}" + (
            f" (also missing: {', '.join(map(repr, missing[1:]))})" if len(missing) > 1 else "")
    extra = [k for k in arguments if k not in props]
    if extra and parameters.get("additionalProperties") is not True:
        return (f"tool {tool_name!r}: unexpected argument {extra[0]!r}; "
                f"it takes {', '.join(map(repr, props)) or 'no arguments'}")
    for key, value in arguments.items():
        if key in props and (err := validate(value, props[key], f"argument {key!r}")):
            return f"tool {tool_name!r}: {err}"
    return None


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
            return ToolResult(False, "", f"tool {self.name!r} raised {type(e).__name__}: {e}",
                              time.monotonic() - t0)
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

    def __init__(self, name: str, url: str, schema: dict, timeout: float = 30.0, description: str = "",
                 headers: Mapping[str, str] | None = None, max_response_bytes: int = 1 << 20):
        self.name, self.url, self.timeout = name, url, timeout
        self.headers = dict(headers or {})
        self.max_response_bytes = max_response_bytes
        if schema.get("type") == "function":
            self._schema = json.loads(json.dumps(schema))
            self._schema["function"]["name"] = name
        else:
            self._schema = {"type": "function",
                            "function": {"name": name, "description": description, "parameters": schema}}

    def schema(self) -> dict:
        return self._schema

    def invoke(self, arguments: dict[str, Any]) -> ToolResult:
        t0 = time.monotonic()
        req = urllib.request.Request(
            self.url, data=json.dumps(arguments).encode(), method="POST",
            headers={"Content-Type": "application/json", **self.headers})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                body = resp.read(self.max_response_bytes + 1)
                ctype = resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            detail = e.read(500).decode("utf-8", "replace").strip()
            return ToolResult(False, "", f"tool {self.name!r}: HTTP {e.code} {e.reason}"
                              + (f": {detail}" if detail else ""), time.monotonic() - t0)
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
                return ToolResult(not err and data.get("ok", True) is not False,
                                  _to_text(data.get("output")), _to_text(err) or None, seconds)
        if truncated:
            text += "\n...[truncated]"
        return ToolResult(True, text, None, seconds)

    def __repr__(self) -> str:
        return f"RemoteHTTPTool({self.name!r}, {self.url!r})"


PYTHON_TOOL_DESCRIPTION = (
    "Run a Python 3 program in an isolated sandbox and return what it prints (stdout, then stderr). "
    "No network, no third-party packages, limited time and memory; print the values you need.")


class PythonTool:
    """The built-in `python` tool: {"code": "..."} runs in the sandbox or on the tool server.

    `execute(code) -> ToolResult` does the work; see `sandboxed` and `remote`. Only the code
    string is passed on: limits come from the sandbox / server configuration, and any other
    argument a model adds (e.g. "timeout": 99999) is rejected by the registry's validation.
    """

    name = "python"

    def __init__(self, execute: Callable[[str], ToolResult], name: str = "python",
                 description: str = PYTHON_TOOL_DESCRIPTION):
        self.execute, self.name = execute, name
        self._schema = {"type": "function", "function": {
            "name": name, "description": description,
            "parameters": {"type": "object", "properties": {
                "code": {"type": "string", "description": "The Python program to run."}},
                "required": ["code"]}}}

    @classmethod
    def sandboxed(cls, cfg=None, mode: str = "bwrap", **kwargs) -> "PythonTool":
        """Runs code in this process's sandbox (relay.tools.sandbox); refuses where it cannot be built."""
        from relay.tools.sandbox import make_runner
        run = make_runner(mode, cfg)
        return cls(lambda code: ToolResult.from_execution(run(code).to_json()), **kwargs)

    @classmethod
    def remote(cls, client, **kwargs) -> "PythonTool":
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

    def register(self, fn_or_tool: Tool | Callable, *, name: str | None = None,
                 description: str | None = None, replace: bool = False):
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

    def call(self, call: ToolCall) -> ToolResult:
        """Validate and run one call. Every failure is a ToolResult(ok=False, error=...)."""
        t0 = time.monotonic()
        t = self._tools.get(call.name)
        if t is None:
            known = ", ".join(map(repr, self._tools)) or "none"
            return ToolResult(False, "", f"unknown tool {call.name!r}; available tools: {known}", 0.0)
        params = t.schema().get("function", {}).get("parameters", {"type": "object", "properties": {}})
        if err := validate_arguments(call.name, call.arguments, params):
            return ToolResult(False, "", err, time.monotonic() - t0)
        try:
            return t.invoke(call.arguments)
        except Exception as e:  # a tool object broke its never-raise contract: keep the rollout alive
            log.exception("tool %s raised", call.name)
            return ToolResult(False, "", f"tool {call.name!r} failed: {type(e).__name__}: {e}",
                              time.monotonic() - t0)
