"""Python syntax of pythonic tool calls (relay/tools/parsers.py, PythonicParser), read in time linear
in the text and without recursion: ast.parse accepts nesting (400 unary minus signs, a long attribute
chain) that ast.unparse and ast.literal_eval, which recurse once per level, fail on with RecursionError."""

from __future__ import annotations

import ast
import math
import re
import tokenize

_OPEN, _CLOSE = "([{", ")]}"
_LINE_BREAK = re.compile(rb"\r\n|\r|\n")  # what Python's tokenizer counts as the end of a line


def dotted_name(node: ast.expr) -> str | None:
    """`f` or `a.b.f` as text (walked, not unparsed: a chain may be hostile-long), else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def syntax_depth(node: ast.AST, limit: int) -> int:
    """Levels of the syntax tree under `node` (itself: 1), counted without recursion; stops past `limit`."""
    deepest, stack = 0, [(node, 1)]
    while stack and deepest <= limit:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(item))
    return deepest


def bracket_end(text: str, start: int) -> int | None:
    """The index after the bracket that closes the one at text[start], found by Python's tokenizer
    in one pass that stops there (brackets inside strings and comments do not count); None when the
    text ends first or cannot be tokenized."""
    if text.find("]", start) == -1:  # no "]" anywhere: no tokenizer pass over the rest of the text
        return None
    line_starts, pos = [], start

    def readline() -> str:
        nonlocal pos
        if pos >= len(text):
            return ""
        nl = text.find("\n", pos)
        end = len(text) if nl == -1 else nl + 1
        line_starts.append(pos)
        line, pos = text[pos:end], end
        return line

    depth = 0
    try:
        for tok in tokenize.generate_tokens(readline):
            if tok.type != tokenize.OP:
                continue
            if tok.string in _OPEN:
                depth += 1
            elif tok.string in _CLOSE:
                depth -= 1
                if depth == 0:
                    row, col = tok.end
                    return line_starts[row - 1] + col
    except (tokenize.TokenError, SyntaxError):  # the text ended inside the list, or a string in it
        return None
    return None


class SourceSegments:
    """ast.get_source_segment for many nodes of one source. That function splits the whole source
    into lines on every call: once per call of a long list, quadratic. Here the source is encoded
    and its line starts found once; a segment then costs its own length."""

    def __init__(self, source: str):
        self.data = source.encode("utf-8", "surrogatepass")
        self.line_starts = [0, *(m.end() for m in _LINE_BREAK.finditer(self.data))]

    def __call__(self, node: ast.AST) -> str:
        if getattr(node, "end_lineno", None) is None:
            return ""
        a = self.line_starts[node.lineno - 1] + node.col_offset  # col offsets count UTF-8 bytes
        b = self.line_starts[node.end_lineno - 1] + node.end_col_offset
        return self.data[a:b].decode("utf-8", "replace")


def json_value(value: object) -> bool:
    """Whether a literal's value is one JSON can carry: str, finite number, bool, None, and lists,
    tuples and string-keyed dicts of those (walked without recursion)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if item is None or isinstance(item, (str, bool, int)):
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                return False
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, dict):
            if not all(isinstance(k, str) for k in item):
                return False
            stack.extend(item.values())
        else:  # bytes, complex, set, frozenset, Ellipsis
            return False
    return True
