"""Hostile model turns cost the parsers work linear in the text: the checks count the work (parses,
source splits) instead of timing it, except where the old cost was hours and the bound is 1000x off."""

from __future__ import annotations

import ast
import time

import pytest

from relay.tools.call_syntax import SourceSegments, bracket_end, json_value
from relay.tools.parsers import get_parser


def test_react_action_padded_with_blanks_is_one_scan():
    # "Action: python" + blanks + "x": the old lazy name pattern retried the trailing blanks at every
    # position (64,000 blanks took 11 s; a million would take about 45 min). Linear: milliseconds.
    text = "Action: python" + " " * 1_000_000 + "x\nAction Input: 1"
    t0 = time.perf_counter()
    res = get_parser("react").parse(text)
    assert time.perf_counter() - t0 < 2.0
    assert len(res.calls) == 1 and res.calls[0].name.startswith("python") and res.calls[0].name.endswith("x")


def test_react_name_is_stripped_as_before():
    res = get_parser("react").parse("Thought: t\nAction:  `python` \t\nAction Input: print(1)\n")
    assert [(c.name, c.arguments) for c in res.calls] == [("python", {"code": "print(1)"})]


@pytest.fixture
def counted(monkeypatch):
    counts = {"parse": 0}
    real_parse = ast.parse

    def parse(*args, **kwargs):
        counts["parse"] += 1
        return real_parse(*args, **kwargs)

    def segment(*args, **kwargs):
        raise AssertionError("ast.get_source_segment re-splits the whole source per call")

    monkeypatch.setattr(ast, "parse", parse)
    monkeypatch.setattr(ast, "get_source_segment", segment)
    return counts


def test_function_call_list_is_parsed_once(counted):
    # Nested lists used to cost a parse of the growing prefix at each inner "]" (and past 256 of
    # them the list was refused); each call's text was found by re-splitting the whole source.
    n = 2000
    text = "[" + ", ".join(f"f(a=[{i}], b='x]')" for i in range(n)) + "] trailing ] text"
    res = get_parser("function_call").parse(text)
    assert len(res.calls) == n and not res.errors
    assert res.calls[-1].arguments == {"a": [n - 1], "b": "x]"} and res.calls[-1].raw == f"f(a=[{n - 1}], b='x]')"
    assert counted["parse"] == 1


def test_function_call_unclosed_list_is_one_error(counted):
    res = get_parser("function_call").parse("[f(a=[1]" + ", [2]" * 5000)
    assert not res.calls and len(res.errors) == 1 and "no closing ]" in res.errors[0]
    assert counted["parse"] == 0


@pytest.mark.parametrize("literal", ["b'print(1)'", "1j", "{1, 2}", "{1: 2}", "1e999", "[b'x']", "{'a': {3}}"])
def test_function_call_values_json_cannot_carry_are_errors(literal):
    # The endpoint sends arguments as JSON: a value it cannot encode is refused here, for the model to read.
    res = get_parser("function_call").parse(f"[python(code={literal}), ok(x=1)]")
    assert [(c.name, c.arguments) for c in res.calls] == [("ok", {"x": 1})]
    assert len(res.errors) == 1 and "literal value JSON can carry" in res.errors[0]


def test_bracket_end_respects_strings_and_comments():
    text = "x [f(a=']'), # ] here\n g(b=\"[\")] tail"
    end = bracket_end(text, 2)
    assert text[2:end].endswith('g(b="[")]') and text[end:] == " tail"
    assert bracket_end("[f(a='''", 0) is None and bracket_end("[f(", 0) is None


def test_source_segments_match_ast():
    src = "[f(a='é'),\r\n  g(b=[1,\n 2]), h(c='日本')]"
    tree, segment = ast.parse(src, mode="eval"), SourceSegments(src)
    for node in ast.walk(tree):
        if hasattr(node, "lineno"):
            assert segment(node) == ast.get_source_segment(src, node)


def test_json_value():
    assert json_value({"a": [1, 2.5, None, True, "s", (1, 2)]})
    assert not json_value(float("nan")) and not json_value({"a": b"x"}) and not json_value([{1}])
