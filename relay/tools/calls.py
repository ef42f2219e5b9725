"""What a tool parser produces, and the helpers every parser shares.

`ToolCall` (a call the model wrote), `ParseResult` (the calls and the errors found in one turn)
and the `ToolParser` protocol; the parsers themselves are in relay/tools/parsers.py.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any]
    raw: str = ""  # the exact text the call was parsed from


@dataclass
class ParseResult:
    calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:  # "did the model try to call a tool?"
        return bool(self.calls or self.errors)


class ToolParser(Protocol):
    name: str
    # Generation stops at these strings (the matched text is kept), so a turn ends with its call.
    stop_strings: tuple[str, ...]
    # None: the observation is appended right after the model's text, as plain text.
    # "tool": it is the content of a {"role": "tool"} message rendered by the chat template.
    result_role: str | None

    def parse(self, text: str) -> ParseResult: ...

    def format_result(self, call: ToolCall, result_text: str) -> str: ...


def _parse_int(digits: str) -> int:
    # Python refuses to convert integers longer than sys.get_int_max_str_digits() (4300 by
    # default) with a ValueError that tells the reader to raise the limit; the model gets this instead.
    limit = sys.get_int_max_str_digits()
    if limit and len(digits.lstrip("-")) > limit:
        raise ValueError(f"an integer of {len(digits.lstrip('-'))} digits is too large (at most {limit})")
    return int(digits)


# strict=False: accept raw newlines and tabs inside JSON strings; models write code that way.
_LENIENT = json.JSONDecoder(strict=False, parse_int=_parse_int)
# What decoding hostile text raises besides json.JSONDecodeError (a ValueError): RecursionError for
# nesting deeper than the interpreter's recursion limit, ValueError for a too-long integer.
JSON_FAILURES = (ValueError, RecursionError)

_FENCE = re.compile(r"^\s*```[\w+-]*[ \t]*\n(.*?)\n?```\s*$", re.S)

# Levels of nested objects and lists a call's arguments may have, the arguments object itself
# being level 1. Real tools take flat arguments or a few levels; model text nested hundreds deep
# decodes within the interpreter's recursion limit but then cannot cross actors: pickling it (Ray
# returning a rollout's Samples, whose tool-call records hold the arguments) hits that limit and
# fails the whole rollout. Deeper arguments are a parse error the model reads, in every parser.
MAX_ARGUMENT_DEPTH = 32


def _strip_fence(text: str) -> str:
    m = _FENCE.match(text)
    return m.group(1) if m else text


def _short(text: str, n: int = 80) -> str:
    text = text.strip().replace("\n", "\\n")
    return text if len(text) <= n else text[: n - 3] + "..."


def _nesting_depth(value: Any, limit: int) -> int:
    """Levels of nested dicts, lists, tuples and sets in `value` (a scalar: 0), counted without
    recursion (the value may be nested past the recursion limit); stops once past `limit`."""
    deepest, stack = 0, [(value, 1)]
    while stack and deepest <= limit:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = [*item.keys(), *item.values()]
        elif isinstance(item, (list, tuple, set, frozenset)):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _checked_call(name: str, arguments: dict[str, Any], raw: str, where: str) -> ToolCall | str:
    """The call, or the error line that refuses it: arguments nested deeper than MAX_ARGUMENT_DEPTH."""
    if _nesting_depth(arguments, MAX_ARGUMENT_DEPTH) > MAX_ARGUMENT_DEPTH:
        return f"{where} ({name}): arguments nested more than {MAX_ARGUMENT_DEPTH} levels deep; pass flatter values"
    return ToolCall(name=name, arguments=arguments, raw=raw)


def _call_from_obj(obj: Any, raw: str, where: str) -> ToolCall | str:
    """{"name": ..., "arguments": {...}} -> ToolCall, or an error message.

    Accepts "parameters" for "arguments" (Llama 3.1 JSON style) and arguments encoded as a JSON
    string (some models emit OpenAI's wire format, where arguments is a string).
    """
    if not isinstance(obj, dict):
        return f'{where}: expected a JSON object with "name" and "arguments", got {type(obj).__name__}'
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return f'{where}: missing "name" (a non-empty string) in {_short(raw)}'
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = _LENIENT.decode(args) if args.strip() else {}
        except JSON_FAILURES as e:
            return f'{where}: "arguments" of {name!r} is a string that is not valid JSON ({_json_reason(e)})'
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return f'{where}: "arguments" of {name!r} must be a JSON object, got {type(args).__name__}'
    return _checked_call(name, args, raw, where)


def _json_reason(e: Exception) -> str:
    if isinstance(e, json.JSONDecodeError):
        return f"{e.msg} at line {e.lineno} column {e.colno}"
    if isinstance(e, RecursionError):
        return "nested too deeply"
    return str(e)


def _json_error(where: str, payload: str, e: Exception) -> str:
    """The model-facing line for any of JSON_FAILURES."""
    return f"{where}: invalid JSON ({_json_reason(e)}) in {_short(payload)}"


def _decode_at(text: str, i: int, window: int = 1024) -> tuple[Any, int]:
    """_LENIENT.raw_decode(text, i) for text[i] in "{[", reading a growing window of the text from i.

    json's error reports count the lines of the whole text before the error, so failing at every
    bracket of a long turn would cost quadratic time; in a window a failure costs what it read.
    A failure at the window's end (or in a string the window cut) is retried with a larger one."""
    while True:
        chunk = text[i : i + window]
        try:
            obj, end = _LENIENT.raw_decode(chunk)
            return obj, i + end
        except json.JSONDecodeError as e:
            cut = i + window < len(text) and (e.pos >= len(chunk) - 6 or e.msg.startswith("Unterminated string"))
            if not cut:
                raise
        window *= 4
