"""docs/tools.md's tool contract, run: its typed function gives the schema the page shows, and the
calls behind its error lines give those lines, as the model reads them."""

from __future__ import annotations

import json
from pathlib import Path

from relay.tools.calls import ToolCall
from relay.tools.registry import ToolRegistry
from relay.tools.schema import function_schema

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "tools.md").read_text()


def blocks(language: str) -> list[str]:
    """The page's fenced blocks opened with ```<language> ("" for a bare fence), in order."""
    found, current = [], None
    for line in PAGE.splitlines():
        if line.startswith("```"):
            if current is None:
                current, opened = [], line[3:].strip()
            else:
                if opened == language:
                    found.append("\n".join(current) + "\n")
                current = None
        elif current is not None:
            current.append(line)
    return found


def boom(x: int) -> int:
    """Divide by x."""
    return 1 // x


def test_the_pages_function_has_the_pages_schema():
    namespace: dict = {}
    exec(blocks("python")[0], namespace)
    assert function_schema(namespace["word_count"]) == json.loads(blocks("json")[0])


def test_the_pages_error_lines_are_what_the_model_reads():
    namespace: dict = {}
    exec(blocks("python")[0], namespace)
    registry = ToolRegistry([namespace["word_count"]])
    calls = [
        ToolCall("wc", {}),
        ToolCall("word_count", {"unique": True}),
        ToolCall("word_count", {"text": "a", "limit": 2}),
        ToolCall("word_count", {"text": 3}),
    ]
    shown = [registry.call(call).observation() for call in calls]
    shown.append(ToolRegistry([boom]).call(ToolCall("boom", {"x": 0})).observation())
    errors = next(b for b in blocks("") if b.startswith("Error:"))
    assert shown == errors.splitlines()
    assert registry.call(ToolCall("word_count", {"text": "a b a", "unique": True})).observation() == "2"
