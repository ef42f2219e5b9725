"""Hostile model text through every tool parser and on into the registry: nothing raises.

A model in training writes anything: unbalanced tags, JSON nested thousands deep, integers of
thousands of digits, NUL bytes, lone surrogates, very long turns. Every parser must turn all of it
into calls or error lines (ParseResult.errors) for the model to read, and the registry must turn
any argument problem of a parsed call into an error result.
"""

from __future__ import annotations

import json
import pickle
import string
from typing import Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relay.tools.calls import _LENIENT, JSON_FAILURES, MAX_ARGUMENT_DEPTH, ParseResult, ToolCall, _nesting_depth
from relay.tools.parsers import PARSERS, _decode_at, get_parser
from relay.tools.registry import ToolRegistry, ToolResult

NAMES = sorted(PARSERS)  # every name get_parser answers to (function_call and its alias pythonic too)
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Pieces of every calling convention, plus the characters JSON and Python literals trip on.
FRAGMENTS = [
    "<tool>",
    "</tool>",
    "<tool_call>",
    "</tool_call>",
    "```",
    "```json\n",
    "```python\n",
    "{",
    "}",
    "[",
    "]",
    "(",
    ")",
    '"',
    "'",
    ":",
    ",",
    "=",
    "\\",
    "\\u",
    "\\ud800",
    "\\x00",
    '"name"',
    '"arguments"',
    '"parameters"',
    '"python"',
    '"code"',
    '{"name": "python", "arguments": ',
    '{"name": ',
    '"arguments": "',
    "Thought: ",
    "Action: ",
    "Action Input: ",
    "Observation:",
    "Final Answer:",
    "[python(",
    "[f(",
    "code=",
    "a=",
    "**",
    "lambda: 0",
    "<|python_start|>",
    "<|python_end|>",
    "<function=",
    "<function=f>",
    "</function>",
    "<parameter=",
    "<parameter=a>",
    "</parameter>",
    "<|channel|>",
    "commentary to=functions.f ",
    "to=",
    "<|message|>",
    "<|call|>",
    "<|end|>",
    "<|start|>",
    "<|python_tag|>",
    "<|eom_id|>",
    "[TOOL_CALLS]",
    "[ARGS]",
    "[CALL_ID]",
    "\n",
    "\t",
    "\x00",
    "\ud800",
    "\udfff",
    "NaN",
    "Infinity",
    "-1e999999",
    "1e400",
    "9" * 5000,
    "-" + "7" * 4400,
    "0." + "1" * 5000,
    "[" * 3000,
    "]" * 3000,
    "{" * 2000,
    '{"a":' * 2000,
    "(" * 500,
    # syntax ast.parse accepts and ast.unparse / literal_eval (recursing per level) do not
    *["-" * 400, "not " * 400, "a." * 400, "[f(), ", "[f(a=", "1)]"],
    "true",
    "null",
    "None",
]

# Any code point, surrogates included (st.text's default alphabet leaves them out).
ANY_CHAR = st.characters(codec=None, exclude_categories=())
adversarial = st.lists(st.sampled_from(FRAGMENTS) | st.text(ANY_CHAR, max_size=8), max_size=40).map("".join)


def check(result: ParseResult) -> ParseResult:
    assert isinstance(result, ParseResult)
    for call in result.calls:
        assert isinstance(call, ToolCall) and isinstance(call.name, str) and call.name
        assert isinstance(call.arguments, dict)
    assert all(isinstance(e, str) and e for e in result.errors)
    return result


@FUZZ
@given(text=st.text(ANY_CHAR, max_size=400), name=st.sampled_from(NAMES))
def test_random_text_never_raises(text, name):
    check(get_parser(name).parse(text))


@FUZZ
@given(text=adversarial, name=st.sampled_from(NAMES))
def test_adversarial_text_never_raises(text, name):
    check(get_parser(name).parse(text))


def wrap(name: str, body: str) -> str:
    """`body` (a JSON object of arguments, maybe broken) placed where each convention puts a call."""
    return {
        "tag": f"<tool>{body}</tool>",
        "hermes": f'<tool_call>{{"name": "f", "arguments": {body}}}</tool_call>',
        "json": f'{{"name": "f", "arguments": {body}}}',
        "react": f"Action: f\nAction Input: {body}\n",
        "function_call": f"[f(a={body})]",
        "pythonic": f"[f(a={body})]",
        "qwen3_coder": f"<tool_call>\n<function=f>\n<parameter=a>\n{body}\n</parameter>\n</function>\n</tool_call>",
        "harmony": f"<|channel|>commentary to=functions.f <|constrain|>json<|message|>{body}<|call|>",
        "openai": f"<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{body}<|call|>",
        "llama3_json": f'<|python_tag|>{{"name": "f", "parameters": {body}}}<|eom_id|>',
        "mistral": f"[TOOL_CALLS]f[ARGS]{body}",
    }[name]


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(string.printable, max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(string.ascii_letters, max_size=5), inner),
    max_leaves=10,
)


@FUZZ
@given(
    value=st.dictionaries(st.text(string.ascii_letters, min_size=1, max_size=5), json_values, max_size=3),
    data=st.data(),
)
def test_a_cut_call_is_an_error_not_a_call(value, data):
    """A well-formed call cut anywhere inside its arguments becomes an error line (the model is told),
    never a call with half its arguments."""
    body = json.dumps(value)
    cut = data.draw(st.integers(1, len(body) - 1), label="cut") if len(body) > 1 else 0
    broken = body[:cut] if cut else "{"
    for name in ("hermes", "react", "function_call", "harmony", "llama3_json", "mistral"):
        result = check(get_parser(name).parse(wrap(name, broken)))
        assert result.errors and not result.calls, (name, broken, result)
    result = check(get_parser("json").parse(wrap("json", broken)))  # starts like a call: reported
    assert result.errors and not result.calls, (broken, result)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    "body",
    [
        "[" * 100_000 + "]" * 100_000,  # nesting far past the recursion limit, balanced
        "[" * 100_000,  # and unbalanced
        '{"a": ' * 50_000 + "1" + "}" * 50_000,
        "9" * 5_000,  # over Python's 4300-digit int conversion limit
        "-" + "9" * 100_000,
        "1e999999",  # parses to inf
        '"\\ud800 \\udfff \\u0000 \\x"',  # lone surrogates, NUL, an invalid escape
        '"\ud800\x00"',
        '"' + "a" * 200_000,  # an unterminated string, a long one
    ],
    ids=["deep", "deep-open", "deep-objects", "big-int", "huge-int", "inf", "escapes", "raw-surrogate", "long"],
)
def test_hostile_arguments_are_errors_or_calls(name, body):
    result = check(get_parser(name).parse(wrap(name, body)))
    assert result  # the model tried to call a tool: it gets a call or an error, never silence


@pytest.mark.parametrize("name", NAMES)
def test_long_repetitive_text_is_parsed(name):
    """Many unclosed or repeated openings in one long turn: each parser answers (linear scans)."""
    for text in [
        "<tool>" * 20_000 + "</tool>",
        "<tool_call>" * 20_000,
        "Action: f\n" * 20_000,
        "[f(" * 20_000 + "]" * 300,
        '{"name": "f", "arguments": ' * 5_000,
        "```json\n{" * 5_000,
        "<function=" * 20_000 + ">",
        "<tool_call><function=f><parameter=a>" * 5_000 + "</tool_call>",
        "<|message|>" * 20_000,
        "<|channel|>commentary to=f<|message|>{" * 5_000,
        "<|python_tag|>{" * 5_000,
        "[TOOL_CALLS]" * 20_000,
        "[TOOL_CALLS]f[ARGS]{" * 5_000,
    ]:
        check(get_parser(name).parse(text))


@FUZZ
@given(
    value=json_values,
    before=st.text(max_size=5),
    after=st.text(max_size=5),
    window=st.integers(1, 16),
    data=st.data(),
)
def test_windowed_decoding_reads_what_raw_decode_reads(value, before, after, window, data):
    """The JSON parser decodes in growing windows (linear time on hostile text): same values and
    ends as json's raw_decode over the whole text, and a failure wherever raw_decode fails."""
    outer = data.draw(st.sampled_from([[value], {"k": value}]), label="outer")  # it starts at { or [
    text = before + json.dumps(outer, ensure_ascii=data.draw(st.booleans())) + after
    i = len(before)
    cut = data.draw(st.integers(i, len(text)), label="cut")  # also texts that end mid-value
    for t in (text, text[:cut]):
        try:
            expected = _LENIENT.raw_decode(t, i)
        except JSON_FAILURES:
            with pytest.raises(JSON_FAILURES):
                _decode_at(t, i, window)
            continue
        assert _decode_at(t, i, window) == expected


def test_the_limits_are_named_for_the_model():
    deep = get_parser("hermes").parse(wrap("hermes", "[" * 5_000 + "]" * 5_000))
    assert deep.errors == [deep.errors[0]] and "nested too deeply" in deep.errors[0]
    big = get_parser("json").parse(wrap("json", '{"n": ' + "9" * 5_000 + "}"))
    assert "an integer of 5000 digits is too large" in big.errors[0]
    nested_tags = get_parser("tag").parse("<tool>" * 1_000 + "print(1)</tool>")
    assert [c.arguments for c in nested_tags.calls] == [{"code": "print(1)"}]
    assert nested_tags.errors == ["<tool> opened again before </tool>: one code block per tag"]


# ------------------------------------------------------------------------------- on into the registry


def registry() -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool
    def f(
        a: int = 0, items: list[int] | None = None, mode: Literal["x", "y"] = "x", opts: dict[str, float] | None = None
    ) -> str:
        """A tool with typed arguments.

        Args:
            a: A number.
            items: Numbers.
            mode: A mode.
            opts: Options.
        """
        return f"{a} {items} {mode} {opts}"

    @reg.tool
    def python(code: str) -> str:
        """Stands in for the sandboxed tool.

        Args:
            code: The program.
        """
        return code[:10]

    return reg


REGISTRY = registry()

# Everything ast.literal_eval can produce from a pythonic call, hostile values included.
literal_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**50), 10**50)
    | st.floats()
    | st.complex_numbers()
    | st.text(ANY_CHAR, max_size=10)
    | st.binary(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.frozensets(st.integers(), max_size=3)
        | st.dictionaries(st.text(ANY_CHAR, max_size=4) | st.integers(), inner, max_size=3)
    ),
    max_leaves=12,
)


@FUZZ
@given(
    name=st.sampled_from(["f", "python", "nope", ""]),
    arguments=st.dictionaries(st.text(ANY_CHAR, max_size=6) | st.integers(), literal_values, max_size=4),
)
def test_registry_turns_any_argument_problem_into_an_error_result(name, arguments):
    result = REGISTRY.call(ToolCall(name, arguments))
    assert isinstance(result, ToolResult) and isinstance(result.observation(), str)
    if not result.ok:
        assert isinstance(result.error, str) and result.error


@FUZZ
@given(text=adversarial, name=st.sampled_from(NAMES))
def test_every_parsed_call_reaches_the_registry_without_raising(text, name):
    for call in check(get_parser(name).parse(text)).calls:
        assert isinstance(REGISTRY.call(call), ToolResult)


def test_registry_hostile_arguments():
    deep: list = []
    for _ in range(50_000):  # nesting past the recursion limit, built without recursion
        deep = [deep]
    for arguments in [
        {"items": deep},
        {"opts": {"k": deep}},
        {"a": 10**5000},  # str() of it raises ValueError: the error message must not
        {"a": float("nan")},
        {"\ud800": 1},
        {1: 2},
        {"a": 1, "code": b"\x00"},
    ]:
        result = REGISTRY.call(ToolCall("f", arguments))
        assert not result.ok and result.error, arguments
    assert REGISTRY.call(ToolCall(["not", "a", "name"], {})).ok is False  # type: ignore[arg-type]


# ------------------------------------------------------------------------------- nesting depth


@pytest.mark.parametrize(
    "text",
    [
        "[f(a=" + "-" * 400 + "1)]",  # ast.parse accepts these; ast.unparse and literal_eval recurse per level
        "[f(a=" + "not " * 400 + "1)]",
        "[f(), " + "-" * 400 + "1]",
        "[" + "a." * 400 + "f(x=1)]",
        "[f(a=" + "(" * 150 + "1" + ")" * 150 + ")]",
    ],
    ids=["unary-minus", "not", "list-element", "attribute-chain", "parentheses"],
)
def test_deep_python_syntax_is_an_error_line(text):
    assert check(get_parser("function_call").parse(text))


@pytest.mark.parametrize("name", [n for n in NAMES if n != "tag"])  # tag's one argument is a string
def test_arguments_nested_past_the_limit_are_refused(name):
    """A valid call whose arguments are nested past MAX_ARGUMENT_DEPTH (the arguments object is
    level 1) is an error line, not a call: such a call, kept in a Sample, fails to pickle."""
    levels_of_wrap = 2 if name in ("function_call", "pythonic", "qwen3_coder") else 1  # f(a={...}): {"a": {...}}

    def parse(depth: int) -> ParseResult:
        lists = depth - levels_of_wrap
        return check(get_parser(name).parse(wrap(name, '{"x": ' + "[" * lists + "1" + "]" * lists + "}")))

    allowed = parse(MAX_ARGUMENT_DEPTH)
    assert allowed.calls and not allowed.errors, allowed.errors
    pickle.dumps(allowed.calls)
    refused = parse(MAX_ARGUMENT_DEPTH + 1)
    assert not refused.calls and f"more than {MAX_ARGUMENT_DEPTH} levels deep" in refused.errors[0], refused
    # About 970 levels decodes at a shallow stack; deeper in one (here, under pytest) the decoder or
    # Python's parser may refuse it first: a refusal either way.
    hostile = parse(970)
    assert not hostile.calls and hostile.errors


def test_depth_is_counted_without_recursion():
    deep: list = []
    for _ in range(50_000):
        deep = [deep]
    assert _nesting_depth({"a": deep}, MAX_ARGUMENT_DEPTH) == MAX_ARGUMENT_DEPTH + 1  # stops once past the limit
    assert _nesting_depth({"a": 1, "b": [1, {"c": (2,)}]}, MAX_ARGUMENT_DEPTH) == 4
    assert _nesting_depth("text", MAX_ARGUMENT_DEPTH) == 0
