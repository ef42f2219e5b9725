"""The released models' tool-call formats (relay/tools/model_parsers.py): each parser reads back the
calls a chat template written in that format renders (round trips, random calls included),
refuses malformed calls with error lines, and takes hostile text (tests/unit/test_parser_fuzz.py
runs every parser, these included, through the shared hostile cases)."""

from __future__ import annotations

import copy
import json
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relay.models.tokenizer import build_tiny_tokenizer
from relay.tools.parsers import get_parser

# Chat templates written for these tests in each model family's layout of an assistant turn that
# calls tools (after the published templates: Qwen3-Coder's, gpt-oss's harmony, Llama 3.1's JSON
# tool calling, Mistral's v3 list and v11 [ARGS] forms). Only what the round trip needs: the user
# turn, the generation prompt, and the assistant's calls.
HEAD = "{%- for m in messages %}{%- if m.role == 'user' %}<|user|>{{ m.content }}<|end_user|>{%- endif %}"
GEN = "{%- endfor %}{%- if add_generation_prompt %}<|assistant|>{%- endif %}"


def assistant(body: str) -> str:
    return HEAD + "{%- if m.role == 'assistant' %}<|assistant|>" + body + "{%- endif %}" + GEN


TEMPLATES = {
    "qwen3_coder": assistant(
        "{%- for c in m.tool_calls %}<tool_call>\n<function={{ c.function.name }}>\n"
        "{%- for k, v in c.function.arguments.items() %}\n<parameter={{ k }}>\n"
        "{%- if v is string %}{{ v }}{%- else %}{{ v | tojson }}{%- endif %}\n</parameter>{%- endfor %}"
        "\n</function>\n</tool_call>{%- endfor %}<|im_end|>"
    ),
    "harmony": assistant(
        "<|channel|>analysis<|message|>I should call a tool.<|end|>"
        "{%- for c in m.tool_calls %}<|start|>assistant<|channel|>commentary to=functions.{{ c.function.name }}"
        " <|constrain|>json<|message|>{{ c.function.arguments | tojson }}<|call|>{%- endfor %}"
    ),
    "llama3_json": assistant(
        "<|python_tag|>{%- for c in m.tool_calls %}"
        '{{ {"name": c.function.name, "parameters": c.function.arguments} | tojson }}'
        "{%- if not loop.last %}; {% endif %}{%- endfor %}<|eom_id|>"
    ),
    "mistral": assistant(
        "[TOOL_CALLS][{%- for c in m.tool_calls %}"
        '{{ {"name": c.function.name, "arguments": c.function.arguments, "id": "a1b2c3d4e"} | tojson }}'
        "{%- if not loop.last %}, {% endif %}{%- endfor %}]</s>"
    ),
    "mistral_args": assistant(
        "{%- for c in m.tool_calls %}[TOOL_CALLS]{{ c.function.name }}[ARGS]{{ c.function.arguments | tojson }}"
        "{%- endfor %}</s>"
    ),
}


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer()


def round_trip(tok, template: str, calls: list[tuple[str, dict]], parser: str):
    t = copy.copy(tok)
    t.chat_template = template
    user = [{"role": "user", "content": "Help me."}]
    tool_calls = [{"type": "function", "function": {"name": n, "arguments": a}} for n, a in calls]
    full = t.apply_chat_template([*user, {"role": "assistant", "tool_calls": tool_calls}], tokenize=False)
    prompt = t.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
    assert full.startswith(prompt)
    turn = full[len(prompt) :]  # what the model writes: its turn after the generation prompt
    result = get_parser(parser).parse(turn)
    assert result.errors == [], (turn, result.errors)
    return [(c.name, c.arguments) for c in result.calls]


CALLS = [
    ("get_weather", {"city": "Paris", "unit": "celsius"}),
    ("python", {"code": 'print("héllo 世界 🎉")\nx = {"a": [1, 2]}', "timeout": 3, "strict": True}),
    ("search.web", {"query": "relay", "filters": {"year": 2025, "tags": ["rl", "ray"]}, "limit": None}),
]


@pytest.mark.parametrize("form", sorted(TEMPLATES))
def test_round_trip_through_a_template_in_the_format(tok, form):
    parser = form.removesuffix("_args")
    assert round_trip(tok, TEMPLATES[form], CALLS, parser) == CALLS
    assert round_trip(tok, TEMPLATES[form], CALLS[:1], parser) == CALLS[:1]


# Arguments a template renders back unchanged: for qwen3_coder a string that reads as JSON ("42",
# "true") comes back decoded, as vLLM's parser reads it too without the tool's schema.
texts = st.text(string.ascii_letters + " _.,!?é世", min_size=1, max_size=12).filter(
    lambda s: s.strip() == s and s not in ("true", "false", "null")
)
values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | texts,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(string.ascii_lowercase, min_size=1, max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
names = st.from_regex(r"[a-z_][a-z0-9_]{0,10}", fullmatch=True)
calls = st.lists(
    st.tuples(names, st.dictionaries(st.text(string.ascii_lowercase, min_size=1, max_size=6), values, max_size=4)),
    min_size=1,
    max_size=3,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls=calls, form=st.sampled_from(sorted(TEMPLATES)))
def test_random_calls_round_trip(tok, calls, form):
    got = round_trip(tok, TEMPLATES[form], calls, form.removesuffix("_args"))
    assert got == [(n, json.loads(json.dumps(a))) for n, a in calls]


@pytest.mark.parametrize(
    "parser, text, error",
    [
        ("qwen3_coder", "<tool_call>\n<function=f>\n<parameter=a>\n1\n</function>\n</tool_call>", "not closed"),
        (
            "qwen3_coder",
            "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</tool_call>",
            "unclosed <function=f>",
        ),
        ("qwen3_coder", '<tool_call>\n{"name": "f"}\n</tool_call>', "expected <function=NAME>"),
        ("qwen3_coder", "<tool_call>\n<function=f>", "unclosed <tool_call>"),
        ("harmony", '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": 1<|call|>', "invalid JSON"),
        ("harmony", "<|channel|>commentary to=functions.f<|message|>[1, 2]<|call|>", "JSON object of arguments"),
        ("llama3_json", '<|python_tag|>{"name": "f", "parameters": {"a": }}', "invalid JSON"),
        ("llama3_json", '<|python_tag|>brave_search.call(query="x")', "expected a JSON object"),
        ("llama3_json", '{"parameters": {"a": 1}}', 'missing "name"'),
        ("mistral", '[TOOL_CALLS][{"name": "f", "arguments": {"a": 1}', "invalid JSON"),
        ("mistral", '[TOOL_CALLS]f{"a": 1}', "[ARGS]"),
        ("mistral", "[TOOL_CALLS]f[ARGS]not json", "must be followed by a JSON object"),
    ],
)
def test_malformed_calls_are_error_lines(parser, text, error):
    result = get_parser(parser).parse(text)
    assert result.calls == [] and len(result.errors) == 1 and error in result.errors[0], result


@pytest.mark.parametrize(
    "parser, text",
    [
        ("qwen3_coder", "I would write <function=f> here, but no call."),
        (
            "harmony",
            "<|channel|>analysis<|message|>thinking<|end|><|start|>assistant<|channel|>final<|message|>42<|return|>",
        ),
        ("llama3_json", "The answer is {42}."),
        ("mistral", "Calls look like [TOOL_CALLS in docs]."),
    ],
)
def test_text_that_is_not_a_call(parser, text):
    assert not get_parser(parser).parse(text)


def test_harmony_recipients_and_qwen3_values():
    text = (
        '<|start|>assistant to=functions.lookup<|channel|>commentary json<|message|>{"id": 7}<|call|>'
        '<|start|>assistant<|channel|>commentary to=browser.search<|message|>{"q": "ray"}<|call|>'
    )
    assert [(c.name, c.arguments) for c in get_parser("openai").parse(text).calls] == [
        ("lookup", {"id": 7}),
        ("browser.search", {"q": "ray"}),
    ]
    xml = '<tool_call>\n<function=f>\n<parameter=n>\n12\n</parameter>\n<parameter=s>\nline one\nline two\n</parameter>\n<parameter=q>\n"12"\n</parameter>\n</function>\n</tool_call>'
    assert get_parser("qwen3_coder").parse(xml).calls[0].arguments == {"n": 12, "s": "line one\nline two", "q": "12"}


def test_the_endpoint_reads_special_tokens_for_these_formats():
    """Harmony, Llama and Mistral mark calls with special tokens: the parsers say so, and the agent
    loop and the endpoint decode the turn with them for these parsers."""
    flags = {
        name: get_parser(name).reads_special_tokens for name in ("qwen3_coder", "harmony", "llama3_json", "mistral")
    }
    assert flags == {"qwen3_coder": False, "harmony": True, "llama3_json": True, "mistral": True}
