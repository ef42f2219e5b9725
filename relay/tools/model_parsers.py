"""Tool-call formats that released models emit, beside relay/tools/parsers.py's five.

  "qwen3_coder"  <tool_call><function=f><parameter=a>1</parameter></function></tool_call>  (Qwen3-Coder)
  "harmony"      <|channel|>commentary to=functions.f <|constrain|>json<|message|>{...}<|call|>  (gpt-oss)
  "llama3_json"  <|python_tag|>{"name": "f", "parameters": {...}}; {...}                  (Llama 3.1 / 3.2 / 3.3)
  "mistral"      [TOOL_CALLS][{"name": "f", "arguments": {...}}]  or  [TOOL_CALLS]f[ARGS]{...}  (Mistral)

Harmony, Llama and Mistral mark calls with special tokens, which a decode that skips special
tokens drops: these parsers set `reads_special_tokens`, and the agent loop and the endpoint give
them the turn decoded with its special tokens. As in parsers.py, malformed calls never raise:
each becomes an error line, arguments nested past MAX_ARGUMENT_DEPTH are refused, and every scan
is linear in the text, whatever the model wrote.
"""

from __future__ import annotations

import re
from typing import Any

from relay.tools.calls import (
    _LENIENT,
    JSON_FAILURES,
    ParseResult,
    ToolCall,
    _call_from_obj,
    _checked_call,
    _decode_at,
    _json_error,
    _short,
)

_NAME = re.compile(r"[A-Za-z_][\w.\-]*")


def _add(res: ParseResult, call: ToolCall | str) -> None:
    (res.calls if isinstance(call, ToolCall) else res.errors).append(call)


class Qwen3CoderParser:
    """Qwen3-Coder's XML calls, one function per <tool_call>:

        <tool_call>
        <function=get_weather>
        <parameter=city>
        Paris
        </parameter>
        </function>
        </tool_call>

    A parameter's value is its text, one newline trimmed at each end; text that is JSON (a number,
    true/false/null, an object, a list, a quoted string) is decoded, as the model writes those
    values bare. The observation is a {"role": "tool"} message (the template's <tool_response>).
    """

    name = "qwen3_coder"
    stop_strings = ("</tool_call>",)
    result_role = "tool"
    reads_special_tokens = False
    # names are bounded and exclude "<": hostile text ("<function=" repeated) is scanned once, not once per opening
    _function = re.compile(r"<function=([^<>\n]{0,256})>")
    _parameter = re.compile(r"<parameter=([^<>\n]{0,256})>")

    def parse(self, text: str) -> ParseResult:
        res, pos, n = ParseResult(), 0, 0
        while (start := text.find("<tool_call>", pos)) != -1:
            n += 1
            body_start = start + len("<tool_call>")
            end = text.find("</tool_call>", body_start)
            if end == -1:
                res.errors.append(f"tool call {n}: unclosed <tool_call>; end it with </tool_call>")
                break
            pos = end + len("</tool_call>")
            _add(res, self._call(text[body_start:end], text[start:pos], f"tool call {n}"))
        return res

    def _call(self, body: str, raw: str, where: str) -> ToolCall | str:
        m = self._function.search(body)
        if m is None:
            return f"{where}: expected <function=NAME> inside <tool_call>"
        name = m.group(1).strip()
        if not _NAME.fullmatch(name):
            return f"{where}: {_short(name, 40)!r} is not a function name"
        close = body.find("</function>", m.end())
        if close == -1:
            return f"{where} ({name}): unclosed <function={name}>; end it with </function>"
        inner, args, p = body[m.end() : close], {}, 0
        while (pm := self._parameter.search(inner, p)) is not None:
            key = pm.group(1).strip()
            end = inner.find("</parameter>", pm.end())
            if end == -1:
                return f"{where} ({name}): parameter {_short(key, 40)!r} is not closed with </parameter>"
            if not key or key in args:
                return f"{where} ({name}): parameter names must be given once each and not be empty"
            value = _value(inner[pm.end() : end])
            if isinstance(value, _TooDeep):
                return f"{where} ({name}): parameter {key!r} is nested too deeply"
            args[key] = value
            p = end + len("</parameter>")
        return _checked_call(name, args, raw, where)

    def format_result(self, call: ToolCall, result_text: str) -> str:
        return result_text


class _TooDeep:
    pass


def _value(text: str) -> Any:
    text = text.removeprefix("\n").removesuffix("\n")
    stripped = text.strip()
    if not stripped or stripped[0] not in '{["-0123456789tfn':
        return text
    try:
        return _LENIENT.decode(stripped)
    except RecursionError:
        return _TooDeep()
    except ValueError:  # not JSON after all (or an integer too long to convert): the text itself
        return text


class HarmonyParser:
    """gpt-oss's harmony format: a call is a message on the commentary channel addressed to a tool,

        <|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>

    (the recipient may also stand before the channel: `<|start|>assistant to=functions.f<|channel|>...`).
    The body is the JSON arguments; `functions.` is dropped from the name, other namespaces
    (browser.search) stay. Messages to no one (analysis, final) are not calls. Generation stops at
    <|call|>; the observation is a {"role": "tool"} message.
    """

    name = "harmony"
    stop_strings = ("<|call|>",)
    result_role = "tool"
    reads_special_tokens = True
    _recipient = re.compile(r"\bto=([^\s<]+)")
    _end = re.compile(r"<\|(?:end|call|return|start)\|>")

    def parse(self, text: str) -> ParseResult:
        res, pos, n = ParseResult(), 0, 0
        while (m := text.find("<|message|>", pos)) != -1:
            header_start, header, body_start = pos, text[pos:m], m + len("<|message|>")
            stop = self._end.search(text, body_start)
            end = stop.end() if stop else len(text)
            body = text[body_start : stop.start() if stop else len(text)]
            pos = end
            to = self._recipient.search(header)
            if to is None:
                continue
            n += 1
            name, where = to.group(1).removeprefix("functions."), f"tool call {n}"
            if not _NAME.fullmatch(name):
                res.errors.append(f"{where}: {_short(name, 40)!r} is not a tool name")
                continue
            payload = body.strip() or "{}"
            try:
                args = _LENIENT.decode(payload)
            except JSON_FAILURES as e:
                res.errors.append(_json_error(f"{where} ({name})", payload, e))
                continue
            if not isinstance(args, dict):
                res.errors.append(f"{where} ({name}): the message must be a JSON object of arguments")
                continue
            _add(res, _checked_call(name, args, text[header_start:end], where))
        return res

    def format_result(self, call: ToolCall, result_text: str) -> str:
        return result_text


class Llama3JsonParser:
    """Llama 3.1-3.3 JSON tool calls (Meta's "JSON based tool calling"): the turn is one or more
    objects `{"name": "f", "parameters": {...}}`, separated by ";", after <|python_tag|> or as the
    turn's start. A turn that neither has the tag nor starts with "{" is text. Built-in tools'
    `brave_search.call(query=...)` syntax is not read. The observation is a {"role": "tool"}
    message (the template's "ipython" turn).
    """

    name = "llama3_json"
    stop_strings: tuple[str, ...] = ()  # the call ends the turn (<|eom_id|>)
    result_role = "tool"
    reads_special_tokens = True
    _tag = "<|python_tag|>"
    _turn_end = re.compile(r"<\|(?:eom_id|eot_id)\|>")

    def parse(self, text: str) -> ParseResult:
        res = ParseResult()
        tag = text.find(self._tag)
        if tag != -1:
            body = text[tag + len(self._tag) :]
        elif text.lstrip().startswith("{"):
            body = text
        else:
            return res
        if (stop := self._turn_end.search(body)) is not None:
            body = body[: stop.start()]
        i, n = 0, 0
        while True:
            while i < len(body) and (body[i].isspace() or body[i] == ";"):
                i += 1
            if i >= len(body):
                return res
            n += 1
            where = f"tool call {n}"
            if body[i] != "{":
                res.errors.append(f'{where}: expected a JSON object {{"name": ..., "parameters": {{...}}}}')
                return res
            try:
                obj, end = _decode_at(body, i)
            except JSON_FAILURES as e:
                res.errors.append(_json_error(where, body[i : i + 200], e))
                return res
            _add(res, _call_from_obj(obj, body[i:end], where))
            i = end

    def format_result(self, call: ToolCall, result_text: str) -> str:
        return result_text


class MistralParser:
    """Mistral's [TOOL_CALLS]: a JSON list of calls (Mistral 7B v0.3, Nemo, Small 3.0/3.1),

        [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "a1b2c3d4e"}]

    or, in later models (Small 3.2, Devstral, Magistral), one marker per call with its arguments
    after [ARGS] (and an optional [CALL_ID]):

        [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}

    The observation is a {"role": "tool"} message ([TOOL_RESULTS] in the template).
    """

    name = "mistral"
    stop_strings: tuple[str, ...] = ()  # the call ends the turn (</s>)
    result_role = "tool"
    reads_special_tokens = True
    _marker = "[TOOL_CALLS]"

    def parse(self, text: str) -> ParseResult:
        res, n = ParseResult(), 0
        pos = text.find(self._marker)
        while pos != -1:
            i = pos + len(self._marker)
            while i < len(text) and text[i].isspace():
                i += 1
            nxt = text.find(self._marker, i)
            segment_end = len(text) if nxt == -1 else nxt
            if i < len(text) and text[i] == "[":  # a JSON list of calls
                try:
                    calls, end = _decode_at(text, i)
                except JSON_FAILURES as e:
                    res.errors.append(_json_error(f"tool call {n + 1}", text[i : i + 200], e))
                    break  # one error line for a broken list, whatever follows
                if not isinstance(calls, list):
                    res.errors.append(f"tool call {n + 1}: [TOOL_CALLS] must be followed by a JSON list of calls")
                    break
                for item in calls:
                    n += 1
                    _add(res, _call_from_obj(item, text[pos:end], f"tool call {n}"))
            else:
                n += 1
                errors = len(res.errors)
                end = self._one(text, pos, i, segment_end, res, f"tool call {n}")
                if len(res.errors) > errors and text.find("[ARGS]", i, segment_end) == -1:
                    break  # markers without calls (hostile repeats): one error line, not one per marker
            pos = text.find(self._marker, max(end, i))
        return res

    def _one(self, text: str, pos: int, i: int, segment_end: int, res: ParseResult, where: str) -> int:
        """NAME[ARGS]{...} (or NAME[CALL_ID]ID[ARGS]{...}) at i; returns where the call ends."""
        args_at = text.find("[ARGS]", i, segment_end)
        if args_at == -1:
            res.errors.append(f'{where}: expected [TOOL_CALLS]name[ARGS]{{...}} or [TOOL_CALLS][{{"name": ...}}]')
            return segment_end
        name = text[i:args_at].split("[CALL_ID]")[0].strip()
        if not _NAME.fullmatch(name):
            res.errors.append(f"{where}: {_short(name, 40)!r} is not a tool name")
            return args_at
        j = args_at + len("[ARGS]")
        while j < len(text) and text[j].isspace():
            j += 1
        if j >= len(text) or text[j] != "{":
            res.errors.append(f"{where} ({name}): [ARGS] must be followed by a JSON object")
            return j
        try:
            args, end = _decode_at(text, j)
        except JSON_FAILURES as e:
            res.errors.append(_json_error(f"{where} ({name})", text[j : j + 200], e))
            return segment_end
        _add(res, _checked_call(name, args, text[pos:end], where))
        return end

    def format_result(self, call: ToolCall, result_text: str) -> str:
        return result_text


MODEL_PARSERS: dict[str, type] = {
    "qwen3_coder": Qwen3CoderParser,
    "harmony": HarmonyParser,
    "openai": HarmonyParser,  # alias: vLLM's name for gpt-oss's parser
    "llama3_json": Llama3JsonParser,
    "mistral": MistralParser,
}
