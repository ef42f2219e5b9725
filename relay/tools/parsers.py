"""Find tool calls in model text. One parser per calling convention, chosen by name.

    parser = get_parser("hermes")
    result = parser.parse(text)          # ParseResult(calls=[ToolCall...], errors=["..."])
    engine stops at parser.stop_strings  # so a turn ends where a call ends
    parser.format_result(call, output)   # the observation the model sees next

Formats (each documented on its class):
  "tag"            <tool>print(1+1)</tool>                               (the built-in tasks' protocol)
  "hermes"         <tool_call>{"name": "f", "arguments": {...}}</tool_call> (Qwen2.5 / Qwen3)
  "json"           {"name": "f", "arguments": {...}} anywhere, or in a ```json fence
  "react"          Thought: ... / Action: f / Action Input: {...}        (Yao et al. 2022)
  "function_call"  [f(a=1, b="x"), g()]                                   (Llama 3.2+ "pythonic")
  and the formats of released models in relay/tools/model_parsers.py: qwen3_coder, harmony, llama3_json, mistral

Malformed calls never raise: each becomes a line in `errors`, written for the model to read and
fix on its next turn. Text that is not a call at all is ignored (no calls, no errors). Arguments
nested deeper than MAX_ARGUMENT_DEPTH (relay/tools/calls.py) are refused the same way, in every
format, and no parser recurses on the model's nesting: hostile text never meets the recursion limit.
"""

from __future__ import annotations

import ast
import re
from typing import Any, ClassVar

from relay.tools.call_syntax import SourceSegments, bracket_end, dotted_name, json_value, syntax_depth
from relay.tools.calls import (
    _LENIENT,
    JSON_FAILURES,
    MAX_ARGUMENT_DEPTH,
    ParseResult,
    ToolCall,
    ToolParser,
    _call_from_obj,
    _checked_call,
    _decode_at,
    _json_error,
    _short,
    _strip_fence,
)
from relay.tools.model_parsers import MODEL_PARSERS


class TagParser:
    """`<tool>CODE</tool>`: CODE is the argument of the `python` tool (the built-in tasks' protocol).

    A markdown fence inside the tag (<tool>```python ... ```</tool>) is removed. The observation
    is `<result>\\nOUTPUT\\n</result>` appended right after the call.
    """

    name = "tag"
    open_tag, close_tag = "<tool>", "</tool>"
    stop_strings = ("</tool>",)
    result_role = None
    tool_name: ClassVar[str] = "python"

    def parse(self, text: str) -> ParseResult:
        res = ParseResult()
        pos = 0
        while (start := text.find(self.open_tag, pos)) != -1:
            body_start = start + len(self.open_tag)
            end = text.find(self.close_tag, body_start)
            if end == -1:
                res.errors.append(f"unclosed {self.open_tag}: the code must end with {self.close_tag}")
                break
            # The last opening before the close: one error for any number of repeated openings.
            nested = text.rfind(self.open_tag, body_start, end)
            if nested != -1:
                res.errors.append(f"{self.open_tag} opened again before {self.close_tag}: one code block per tag")
                pos = nested
                continue
            code = _strip_fence(text[body_start:end])
            raw = text[start : end + len(self.close_tag)]
            if not code.strip():
                res.errors.append(f"empty {self.open_tag}{self.close_tag}: put Python code between the tags")
            else:
                call = _checked_call(self.tool_name, {"code": code}, raw, "tool call")  # one string: never too deep
                (res.calls if isinstance(call, ToolCall) else res.errors).append(call)
            pos = end + len(self.close_tag)
        return res

    def format_result(self, call: ToolCall, result_text: str) -> str:
        return f"\n<result>\n{result_text}\n</result>\n"


class HermesParser:
    """`<tool_call>\\n{"name": "f", "arguments": {...}}\\n</tool_call>`, one JSON object per tag.

    The Hermes-2-Pro convention used by Qwen2.5 and Qwen3 chat templates. The observation is the
    content of a {"role": "tool"} message; the chat template wraps it in <tool_response>.
    """

    name = "hermes"
    open_tag, close_tag = "<tool_call>", "</tool_call>"
    stop_strings = ("</tool_call>",)
    result_role = "tool"

    def parse(self, text: str) -> ParseResult:
        res = ParseResult()
        pos, n = 0, 0
        while (start := text.find(self.open_tag, pos)) != -1:
            n += 1
            where = f"tool call {n}"
            body_start = start + len(self.open_tag)
            end = text.find(self.close_tag, body_start)
            if end == -1:
                res.errors.append(f"{where}: unclosed {self.open_tag}; end it with {self.close_tag}")
                break
            payload = _strip_fence(text[body_start:end]).strip()
            raw = text[start : end + len(self.close_tag)]
            pos = end + len(self.close_tag)
            try:
                obj = _LENIENT.decode(payload)
            except JSON_FAILURES as e:
                res.errors.append(_json_error(where, payload, e))
                continue
            call = _call_from_obj(obj, raw, where)
            (res.calls if isinstance(call, ToolCall) else res.errors).append(call)
        return res

    def format_result(self, call: ToolCall, result_text: str) -> str:
        return result_text


class JsonParser:
    """A bare JSON object `{"name": "f", "arguments": {...}}` anywhere in the text.

    Also: several objects, a JSON list of them, and objects inside ```json fences. Objects
    without a "name" key are not calls (models write JSON for other reasons); a ```json fence
    whose content is not valid JSON, or an object with "arguments" but no "name", is an error.
    There is no end marker, so no stop strings: the turn ends at end-of-sequence. The
    observation is the content of a {"role": "tool"} message.
    """

    name = "json"
    stop_strings: tuple[str, ...] = ()
    result_role = "tool"
    _fence = re.compile(r"```(?:json)?[ \t]*\n(.*?)```", re.S)
    _call_start = re.compile(r'\{\s*"(?:name|arguments)"\s*:')
    # Where a call or a list of calls can start: an object with a string key (or empty), a list
    # of objects or lists (or empty). Other brackets are skipped without decoding.
    _candidate = re.compile(r'\{\s*["}]|\[\s*[\[{\]]')

    def parse(self, text: str) -> ParseResult:
        res = ParseResult()
        bad_fences = []
        for m in self._fence.finditer(text):
            body = m.group(1).strip()
            if body and body[0] in "{[":
                try:
                    _LENIENT.decode(body)
                except JSON_FAILURES as e:
                    res.errors.append(_json_error("tool call in ```json block", body, e))
                    bad_fences.append((m.start(), m.end()))
        i = 0
        while (start := self._candidate.search(text, i)) is not None:
            i = start.start()
            try:
                obj, end = _decode_at(text, i)
            except JSON_FAILURES as e:
                in_bad_fence = any(a <= i < b for a, b in bad_fences)
                if self._call_start.match(text, i) and not in_bad_fence:
                    # It starts like a call ({"name": ...) but does not parse: tell the model.
                    res.errors.append(_json_error("tool call", text[i : i + 200], e))
                    i = self._skip_object(text, i)
                elif isinstance(e, RecursionError):  # deep brackets that are no call: skip them whole, once
                    i = self._skip_object(text, i)
                else:
                    i += 1
                continue
            raw = text[i:end]
            items = obj if isinstance(obj, list) else [obj]
            for item in items:
                if isinstance(item, dict) and "name" in item:
                    call = _call_from_obj(item, raw, f"tool call {len(res.calls) + len(res.errors) + 1}")
                    (res.calls if isinstance(call, ToolCall) else res.errors).append(call)
                elif isinstance(item, dict) and "arguments" in item:
                    res.errors.append(f'tool call: missing "name" in {_short(raw)}')
            i = end
        return res

    @staticmethod
    def _skip_object(text: str, i: int) -> int:
        """Index after the balanced {...} starting at i (strings respected), or the end of text."""
        depth, in_str, esc = 0, False, False
        for j in range(i, len(text)):
            c = text[j]
            if in_str:
                esc, in_str = (False, in_str) if esc else (c == "\\", c != '"')
            elif c == '"':
                in_str = True
            elif c in "{[":
                depth += 1
            elif c in "}]":
                depth -= 1
                if depth == 0:
                    return j + 1
        return len(text)

    def format_result(self, call: ToolCall, result_text: str) -> str:
        return result_text


class ReActParser:
    """ReAct (Yao et al. 2022, arXiv:2210.03629) lines:

        Thought: I should compute it.
        Action: python
        Action Input: {"code": "print(6*7)"}

    Action Input is a JSON object of arguments, or plain text: plain text becomes the one
    argument named by `text_arguments` for that tool ({"python": "code"}), else "input".
    Several Action / Action Input pairs in one turn are several calls. Generation stops at
    "Observation:", which the observation then supplies. "Final Answer:" ends the episode and is
    not a call.
    """

    name = "react"
    stop_strings = ("Observation:",)
    result_role = None
    # The name is the rest of the line, stripped in Python: a lazy `(.*?)[ \t]*$` retried the trailing
    # blanks at every position of a long run of them (quadratic backtracking on "Action: f" + spaces + "x").
    _action = re.compile(r"^[ \t]*Action[ \t]*:(.*)$", re.M)
    _input = re.compile(r"^[ \t]*Action[ \t]+Input[ \t]*:[ \t]?", re.M)
    _section_end = re.compile(r"^[ \t]*(?:Observation|Thought|Action|Final Answer)[ \t]*:", re.M)

    def __init__(self, text_arguments: dict[str, str] | None = None, default_argument: str = "input"):
        self.text_arguments = {"python": "code"} if text_arguments is None else dict(text_arguments)
        self.default_argument = default_argument

    def parse(self, text: str) -> ParseResult:
        res = ParseResult()
        for n, m in enumerate(self._action.finditer(text), start=1):
            where = f"Action {n}"
            name = m.group(1).strip().strip("`'\"")
            next_action = self._action.search(text, m.end())
            # Only up to the next Action line: text of many Action lines stays linear.
            inp = self._input.search(text, m.end(), next_action.start() if next_action else len(text))
            if not name:
                res.errors.append(f'{where}: empty tool name after "Action:"')
                continue
            if inp is None:
                res.errors.append(f'{where}: "Action: {name}" needs an "Action Input:" line after it')
                continue
            body_start = inp.end()
            stop = self._section_end.search(text, body_start)
            body_end = stop.start() if stop else len(text)
            body = text[body_start:body_end].strip()
            raw = text[m.start() : body_end].rstrip()
            stripped = _strip_fence(body).strip()
            if stripped.startswith("{"):
                try:
                    obj, end = _LENIENT.raw_decode(stripped)
                except JSON_FAILURES as e:
                    res.errors.append(_json_error(f"{where} ({name})", stripped, e))
                    continue
                if stripped[end:].strip():
                    res.errors.append(
                        f"{where} ({name}): unexpected text after the JSON arguments: {_short(stripped[end:])}"
                    )
                    continue
                if not isinstance(obj, dict):
                    res.errors.append(f"{where} ({name}): Action Input must be a JSON object or plain text")
                    continue
                call = _checked_call(name, obj, raw, where)
                (res.calls if isinstance(call, ToolCall) else res.errors).append(call)
            else:
                arg = self.text_arguments.get(name, self.default_argument)
                res.calls.append(ToolCall(name, {arg: stripped}, raw))
        return res

    def format_result(self, call: ToolCall, result_text: str) -> str:
        return f"Observation: {result_text}\n"


class PythonicParser:
    """Llama 3.2+ "pythonic" calls: a Python list of calls with keyword arguments,

        [get_weather(city="Paris", unit="celsius"), python(code="print(1)")]

    as documented in Meta's Llama 3.2 / 3.3 / 4 model cards ("tool calling, pythonic format")
    and parsed by vLLM's `pythonic` tool parser. Llama 4's <|python_start|> / <|python_end|>
    wrappers are accepted. Argument values must be Python literals (strings, numbers, True/
    False/None, lists, dicts); they are read with `ast`, never evaluated. The observation is the
    content of a {"role": "tool"} message (rendered as Llama's "ipython" turn).
    """

    name = "function_call"
    stop_strings: tuple[str, ...] = ()  # the call ends the turn (<|eom_id|> / <|eot_id|>)
    result_role = "tool"
    _start = re.compile(r"\[\s*[A-Za-z_][\w.]*\s*\(")

    def parse(self, text: str) -> ParseResult:
        res = ParseResult()
        text = text.replace("<|python_start|>", "").replace("<|python_end|>", "")
        pos = 0
        while (m := self._start.search(text, pos)) is not None:
            start = m.start()
            # The list ends at the "]" that closes its "[", found by Python's own tokenizer in one pass
            # (strings and comments respected), then parsed once. Trying each later "]" until a prefix
            # parsed cost a parse of the prefix per nested list: quadratic in a long list of calls.
            end = bracket_end(text, start)
            tree, why = None, "no closing ]"
            if end is not None:
                try:
                    tree = ast.parse(text[start:end], mode="eval")
                except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
                    why = getattr(e, "msg", None) or str(e)
            if tree is None:
                res.errors.append(
                    f"function call list at {_short(text[start:], 40)!r} is not valid "
                    f"Python call syntax ({why}); write [name(arg=value, ...)]"
                )
                break
            pos = end
            if not isinstance(tree.body, ast.List):
                continue
            segment = SourceSegments(text[start:end])
            for k, node in enumerate(tree.body.elts, start=1):
                call = self._call(node, k, segment)
                (res.calls if isinstance(call, ToolCall) else res.errors).append(call)
        return res

    @staticmethod
    def _call(node: ast.expr, k: int, segment: SourceSegments) -> ToolCall | str:
        # Error lines quote the model's own text (its source segment), never ast.unparse: unparse
        # recurses once per level and fails on hostile nesting that ast.parse accepted (400 "-" signs).
        def text(part: ast.AST) -> str:
            return _short(segment(part), 40)

        where = f"call {k}"
        if not isinstance(node, ast.Call):
            return f"{where}: expected name(arg=value, ...), got {text(node)!r}"
        name = dotted_name(node.func)
        if name is None or not re.fullmatch(r"[A-Za-z_][\w.]*", name):
            return f"{where}: {text(node.func)!r} is not a tool name"
        if node.args:
            return f"{where} ({name}): pass arguments by keyword, e.g. {name}(x=1)"
        args = {}
        for kw in node.keywords:
            if kw.arg is None:
                return f"{where} ({name}): **kwargs is not allowed; pass arguments by keyword"
            # literal_eval recurses once per level too, so syntax deeper than any allowed value is
            # refused unread: a value allowed under the arguments object (MAX_ARGUMENT_DEPTH - 1 levels)
            # is at most MAX_ARGUMENT_DEPTH + 2 nodes deep (its leaf may be -1+2j: three nodes).
            if syntax_depth(kw.value, MAX_ARGUMENT_DEPTH + 2) > MAX_ARGUMENT_DEPTH + 2:
                return f"{where} ({name}): argument {kw.arg!r} is nested more than {MAX_ARGUMENT_DEPTH} levels deep"
            try:
                value = ast.literal_eval(kw.value)
                ok = json_value(value)  # b"..", 1j, {1, 2} are literals but no JSON: the reply could not carry them
            except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
                ok = False
            if not ok:
                return (
                    f"{where} ({name}): argument {kw.arg!r} must be a literal value JSON can carry (string, "
                    f"number, list, dict with string keys, True/False/None), got {text(kw.value)!r}"
                )
            args[kw.arg] = value
        return _checked_call(name, args, segment(node), where)

    def format_result(self, call: ToolCall, result_text: str) -> str:
        return result_text


PARSERS: dict[str, type] = {
    "tag": TagParser,
    "hermes": HermesParser,
    "json": JsonParser,
    "react": ReActParser,
    "function_call": PythonicParser,
    "pythonic": PythonicParser,  # alias: the name vLLM and Meta use
    **MODEL_PARSERS,  # qwen3_coder, harmony (alias openai), llama3_json, mistral: relay/tools/model_parsers.py
}


def get_parser(name: str, **kwargs: Any) -> ToolParser:
    """A parser by name (see PARSERS); kwargs go to its constructor (e.g. ReActParser's)."""
    try:
        cls = PARSERS[name]
    except KeyError:
        raise ValueError(f"unknown tool parser {name!r}; choose one of {sorted(PARSERS)}") from None
    return cls(**kwargs)
