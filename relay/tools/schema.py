"""JSON schemas for tools: derived from a typed Python function, and checked against a call's arguments.

    function_schema(fn)          OpenAI function-calling schema from the signature, type hints and
                                 Google-style docstring (parse_docstring, type_schema)
    validate_arguments(name, arguments, parameters)
                                 the first thing wrong with a call's arguments, as a message for the
                                 model naming the tool and the argument path; None when they fit

Both cover the subset of JSON schema tool signatures use (string, integer, number, boolean, null,
array with items / prefixItems, object with properties / additionalProperties, enum, anyOf).
Validation takes a schema dict, not a Python type, because remote HTTP tools arrive with a JSON
schema only. A type the schema cannot describe raises TypeError at registration.
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, Union

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
        return {
            "type": "array",
            "prefixItems": [type_schema(a) for a in args],
            "minItems": len(args),
            "maxItems": len(args),
        }
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
    raise TypeError(
        f"cannot describe {tp!r} in a tool schema; use int, float, str, bool, list, dict, Optional, Union or Literal"
    )


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
    return {
        "type": "function",
        "function": {"name": name, "description": description or doc_desc, "parameters": params},
    }


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
    kind = {
        str: "string",
        bool: "boolean",
        int: "integer",
        float: "number",
        list: "array",
        dict: "object",
        type(None): "null",
    }.get(type(v), type(v).__name__)
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
            f" (also missing: {', '.join(map(repr, missing[1:]))})" if len(missing) > 1 else ""
        )
    extra = [k for k in arguments if k not in props]
    if extra and parameters.get("additionalProperties") is not True:
        return (
            f"tool {tool_name!r}: unexpected argument {extra[0]!r}; "
            f"it takes {', '.join(map(repr, props)) or 'no arguments'}"
        )
    for key, value in arguments.items():
        if key in props and (err := validate(value, props[key], f"argument {key!r}")):
            return f"tool {tool_name!r}: {err}"
    return None
