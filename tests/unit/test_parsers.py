"""Tool-call parsers: well-formed, malformed, several calls per turn, nested quotes, unicode."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.tools.calls import ParseResult, ToolCall
from relay.tools.parsers import PARSERS, get_parser

UNI = "héllo 世界 🎉 naïve"


def calls(name: str, text: str, **kw) -> list[tuple[str, dict]]:
    res = get_parser(name, **kw).parse(text)
    assert res.errors == [], res.errors
    return [(c.name, c.arguments) for c in res.calls]


def errors(name: str, text: str) -> list[str]:
    res = get_parser(name).parse(text)
    assert res.calls == []
    assert res.errors and all(isinstance(e, str) and e for e in res.errors)
    return res.errors


# ---------------------------------------------------------------------------------- registry


def test_get_parser_by_name_and_unknown_name():
    for name in ("tag", "hermes", "json", "react", "function_call"):
        p = get_parser(name)
        assert isinstance(p.stop_strings, tuple) and all(isinstance(s, str) for s in p.stop_strings)
        assert p.result_role in (None, "tool")
    assert set(PARSERS) >= {"tag", "hermes", "json", "react", "function_call"}
    with pytest.raises(ValueError, match="unknown tool parser 'xml'.*hermes"):
        get_parser("xml")


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_plain_text_is_not_a_call(name):
    res = get_parser(name).parse("The answer is 42. No tools needed [see above] {maybe}.")
    assert res == ParseResult() and not res


@settings(max_examples=150, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from(list("<>/{}[]()\":,= \n\tabc_toolcalnmeruigsAITFOvp\\'`é")), max_size=120),
    name=st.sampled_from(sorted(PARSERS)),
)
def test_parsers_never_raise(text, name):
    res = get_parser(name).parse(text)
    assert isinstance(res, ParseResult)
    assert all(isinstance(c, ToolCall) and isinstance(c.arguments, dict) for c in res.calls)
    assert all(isinstance(e, str) for e in res.errors)


# ---------------------------------------------------------------------------------- tag


def test_tag_well_formed_and_stop_string():
    p = get_parser("tag")
    res = p.parse("Let me compute.\n<tool>print(6 * 7)</tool>")
    assert res.calls == [ToolCall("python", {"code": "print(6 * 7)"}, "<tool>print(6 * 7)</tool>")]
    assert p.stop_strings == ("</tool>",)
    assert p.format_result(res.calls[0], "42") == "\n<result>\n42\n</result>\n"
    assert p.result_role is None


def test_tag_several_calls_nested_quotes_unicode_and_fences():
    text = (
        f"<tool>print('a \"b\" \\'c\\'')</tool> then <tool>```python\nprint('{UNI}')\n```</tool>"
        '<tool>s = "</tol>"\nprint(s)</tool>'
    )
    assert calls("tag", text) == [
        ("python", {"code": "print('a \"b\" \\'c\\'')"}),
        ("python", {"code": f"print('{UNI}')"}),
        ("python", {"code": 's = "</tol>"\nprint(s)'}),
    ]


def test_tag_malformed():
    assert "unclosed <tool>" in errors("tag", "<tool>print(1)")[0]
    assert "empty" in errors("tag", "<tool>  </tool>")[0]
    res = get_parser("tag").parse("<tool>a<tool>print(2)</tool>")
    assert res.calls == [ToolCall("python", {"code": "print(2)"}, "<tool>print(2)</tool>")]
    assert "opened again" in res.errors[0]


# ---------------------------------------------------------------------------------- hermes


def test_hermes_well_formed_qwen_style():
    p = get_parser("hermes")
    text = (
        'I will check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>'
    )
    res = p.parse(text)
    assert [(c.name, c.arguments) for c in res.calls] == [("get_weather", {"city": "Paris", "days": 3})]
    assert res.calls[0].raw.startswith("<tool_call>") and res.calls[0].raw.endswith("</tool_call>")
    assert p.stop_strings == ("</tool_call>",) and p.result_role == "tool"
    assert p.format_result(res.calls[0], "sunny") == "sunny"


def test_hermes_several_calls_nested_quotes_unicode():
    args = {"code": 'print(\'x "y"\')\nprint("\\\\n")', "note": UNI, "nested": {"a": [1, {"b": "}"}]}}
    text = (
        f"<tool_call>{json.dumps({'name': 'python', 'arguments': args})}</tool_call>\n"
        f"<tool_call>{json.dumps({'name': 'echo', 'arguments': {'s': UNI}}, ensure_ascii=False)}</tool_call>"
        # OpenAI wire style: arguments as a JSON string
        '<tool_call>{"name": "f", "arguments": "{\\"x\\": 1}"}</tool_call>'
    )
    assert calls("hermes", text) == [("python", args), ("echo", {"s": UNI}), ("f", {"x": 1})]


def test_hermes_raw_newlines_in_strings_are_accepted():
    text = '<tool_call>{"name": "python", "arguments": {"code": "x = 1\nprint(x)"}}</tool_call>'
    assert calls("hermes", text) == [("python", {"code": "x = 1\nprint(x)"})]


def test_hermes_malformed_each_becomes_an_error_and_good_calls_survive():
    text = (
        '<tool_call>{"name": "a", "arguments": {"x": 1,}}</tool_call>'
        '<tool_call>{"arguments": {}}</tool_call>'
        '<tool_call>{"name": "b", "arguments": [1, 2]}</tool_call>'
        '<tool_call>["not", "an", "object"]</tool_call>'
        '<tool_call>{"name": "ok", "arguments": {}}</tool_call>'
        '<tool_call>{"name": "c"'
    )
    res = get_parser("hermes").parse(text)
    assert [(c.name, c.arguments) for c in res.calls] == [("ok", {})]
    assert len(res.errors) == 5
    assert "tool call 1: invalid JSON" in res.errors[0]
    assert 'missing "name"' in res.errors[1]
    assert "\"arguments\" of 'b' must be a JSON object" in res.errors[2]
    assert "expected a JSON object" in res.errors[3]
    assert "unclosed <tool_call>" in res.errors[4]


# ---------------------------------------------------------------------------------- json


def test_json_bare_object_fence_list_and_parameters_key():
    text = (
        'Calling {"name": "add", "arguments": {"a": 1, "b": 2}} now.\n'
        '```json\n[{"name": "g", "parameters": {"q": "x \\"y\\""}}, {"name": "h", "arguments": {}}]\n```'
    )
    assert calls("json", text) == [("add", {"a": 1, "b": 2}), ("g", {"q": 'x "y"'}), ("h", {})]
    p = get_parser("json")
    assert p.stop_strings == () and p.result_role == "tool"


def test_json_unicode_and_nested_braces_in_strings():
    text = json.dumps({"name": "echo", "arguments": {"s": UNI + " {not json}", "n": {"k": "]"}}}, ensure_ascii=False)
    assert calls("json", "x " + text + " y") == [("echo", {"s": UNI + " {not json}", "n": {"k": "]"}})]


def test_json_objects_without_name_are_ignored_but_broken_calls_are_reported():
    assert get_parser("json").parse('config: {"a": 1} and [1, 2, {"b": null}]') == ParseResult()
    errs = errors("json", 'try {"name": "add", "arguments": {"a": 1} oops')
    assert "invalid JSON" in errs[0]
    errs = errors("json", '```json\n{"name": "add", "arguments": {"a": 1,}}\n```')
    assert "```json block: invalid JSON" in errs[0]
    assert 'missing "name"' in errors("json", '{"arguments": {"a": 1}}')[0]


# ---------------------------------------------------------------------------------- react


def test_react_json_input_text_input_and_format():
    p = get_parser("react")
    text = (
        'Thought: I need the weather.\nAction: get_weather\nAction Input: {"city": "Paris"}\n'
        "Thought: and compute\nAction: python\nAction Input: print('a \"b\"')\n"
    )
    assert calls("react", text) == [("get_weather", {"city": "Paris"}), ("python", {"code": "print('a \"b\"')"})]
    assert p.stop_strings == ("Observation:",) and p.result_role is None
    assert p.format_result(ToolCall("python", {}), "42") == "Observation: 42\n"


def test_react_stops_at_observation_and_ignores_final_answer():
    text = f"Thought: t\nAction: search\nAction Input: {UNI}\nObservation: old\nFinal Answer: done"
    assert calls("react", text) == [("search", {"input": UNI})]
    assert get_parser("react").parse("Thought: easy\nFinal Answer: 4") == ParseResult()


def test_react_multiline_json_input_and_custom_text_argument():
    text = 'Action: python\nAction Input: {\n  "code": "for i in range(2):\\n    print(i)"\n}\n'
    assert calls("react", text) == [("python", {"code": "for i in range(2):\n    print(i)"})]
    assert calls("react", "Action: shell\nAction Input: ls -la", text_arguments={"shell": "cmd"}) == [
        ("shell", {"cmd": "ls -la"})
    ]


def test_react_malformed():
    res = get_parser("react").parse(
        'Action: a\nAction Input: {"x": 1\nThought: hmm\nAction: b\nThought: no input\n'
        'Action:\nAction Input: {}\nAction: c\nAction Input: {"x": 1} trailing\n'
        "Action: ok\nAction Input: {}"
    )
    assert [(c.name, c.arguments) for c in res.calls] == [("ok", {})]
    assert len(res.errors) == 4
    assert "invalid JSON" in res.errors[0]
    assert 'needs an "Action Input:"' in res.errors[1]
    assert "empty tool name" in res.errors[2]
    assert "unexpected text after the JSON" in res.errors[3]


# ---------------------------------------------------------------------------------- function_call


def test_pythonic_llama_style_several_calls():
    p = get_parser("function_call")
    text = '[get_weather(city="San Francisco", days=3), search(q=\'ray\', filters={"year": 2024, "ok": True}), now()]'
    assert calls("function_call", text) == [
        ("get_weather", {"city": "San Francisco", "days": 3}),
        ("search", {"q": "ray", "filters": {"year": 2024, "ok": True}}),
        ("now", {}),
    ]
    res = p.parse(text)
    assert res.calls[0].raw == 'get_weather(city="San Francisco", days=3)'
    assert p.result_role == "tool" and p.format_result(res.calls[0], "fog") == "fog"
    assert get_parser("pythonic").parse(text) == res


def test_pythonic_nested_quotes_brackets_unicode_and_llama4_wrappers():
    text = (
        "<|python_start|>[python(code='print(\"a]b\", \\'c\\')\\nx = [1, [2]]'), "
        f'echo(s="{UNI}", xs=[1, (2, 3)], none=None)]<|python_end|>'
    )
    assert calls("function_call", text) == [
        ("python", {"code": "print(\"a]b\", 'c')\nx = [1, [2]]"}),
        ("echo", {"s": UNI, "xs": [1, (2, 3)], "none": None}),
    ]


def test_pythonic_in_prose():
    assert calls("function_call", "Sure, calling now: [calc(x=2)] and that's it.") == [("calc", {"x": 2})]


def test_pythonic_malformed_never_evaluates():
    assert "not valid Python call syntax" in errors("function_call", "[f(x=1, ]")[0]
    res = get_parser("function_call").parse('[f(1), g(x=__import__("os").system("echo pwned")), h(**k), ok(a=1)]')
    assert [(c.name, c.arguments) for c in res.calls] == [("ok", {"a": 1})]
    assert "pass arguments by keyword" in res.errors[0]
    assert "must be a literal value" in res.errors[1]
    assert "**kwargs" in res.errors[2]
