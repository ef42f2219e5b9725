"""Every relative link in README.md and docs/ points at a file that exists, and every #anchor at a
heading of its page (GitHub's anchor rules). Links inside code blocks and to URLs are not checked."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def prose(text: str) -> str:
    """The page without its fenced code blocks and inline code spans."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(out)


def anchors(page: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation dropped, spaces to hyphens, -1, -2 for repeats."""
    seen: dict[str, int] = {}
    ids = set()
    fenced = False
    for line in page.read_text().splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
        if fenced or not line.startswith("#"):
            continue
        title = line.lstrip("#").strip()
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        ids.add(slug if n == 0 else f"{slug}-{n}")
    return ids


def broken_links() -> list[str]:
    broken = []
    for page in pages():
        for target in LINK.findall(prose(page.read_text())):
            if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(ROOT)}: {target}"
            if not dest.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{where} (no such heading)")
    return broken


def test_relative_links_resolve():
    assert broken_links() == []


if __name__ == "__main__":
    print("\n".join(broken_links()) or "every link resolves")


def test_the_recipe_table_has_a_row_for_every_shipped_config():
    """docs/configuration.md's Recipes lists every file of configs/, so a newcomer sees them all."""
    text = (ROOT / "docs" / "configuration.md").read_text()
    table = text.split("## Recipes", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"\(\.\./configs/([\w.-]+\.yaml)\)", table))
    shipped = {p.name for p in (ROOT / "configs").glob("*.yaml")}
    assert shipped - listed == set(), "configs without a row in docs/configuration.md's Recipes"
