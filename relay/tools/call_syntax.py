"""Python syntax trees of pythonic tool calls (relay/tools/parsers.py, PythonicParser), read
without recursion: ast.parse accepts nesting (400 unary minus signs, a long attribute chain) that
ast.unparse and ast.literal_eval, which recurse once per level, fail on with RecursionError."""

from __future__ import annotations

import ast


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
