"""The documentation's relative links lead somewhere, and the README stays a front page.

Every markdown link ``[text](target)`` in README.md and in the ``*.md`` files under ``docs/`` and
``bench/`` whose target is not a web or mail address must name a file or folder that exists,
resolved from the linking file's folder (an ``#anchor`` is ignored). Links inside code blocks and
inline code are not links and are skipped.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_README_LINES = 150

FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
EXTERNAL = ("http://", "https://", "mailto:")


def markdown_files() -> list[Path]:
    files = [README]
    for folder in ("docs", "bench"):
        files.extend(sorted((ROOT / folder).rglob("*.md")))
    return files


def links(text: str) -> list[str]:
    """The link targets of a markdown text, code blocks and inline code left out."""
    text = INLINE_CODE.sub("", FENCE.sub("", text))
    return LINK.findall(text)


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in links(path.read_text(encoding="utf-8")):
        if target.lower().startswith(EXTERNAL):
            continue
        local = target.split("#", 1)[0]
        if not local:  # a link to an anchor of the same file
            continue
        if not (path.parent / local).exists():
            broken.append(target)
    return broken


def test_links_parser_finds_links_outside_code_only() -> None:
    text = (
        "[a](x.md) and [b](../y/#part) and [web](https://example.com)\n"
        "`[not](code.md)`\n"
        "```\n[not](fenced.md)\n```\n"
    )
    assert links(text) == ["x.md", "../y/#part", "https://example.com"]


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    assert broken_links(path) == [], f"{path.relative_to(ROOT)}: links to missing files"


def test_readme_is_a_front_page() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines (at most {MAX_README_LINES})"


def where_is_rows(text: str) -> list[tuple[str, str, list[str]]]:
    """The README's "Where is ..." table: (what, file, names) for each row."""
    section = text.split("## Where is", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[1].startswith("`"):
            rows.append((cells[0], re.findall(r"`([^`]+)`", cells[1])[0], re.findall(r"`([^`]+)`", cells[2])))
    return rows


def test_the_readmes_where_is_table_names_files_and_names_that_exist() -> None:
    """Each "Where is ..." row is a file of the repository that defines the names it gives (a
    function, a class or a module-level constant), so a newcomer's first question lands."""
    rows = where_is_rows(README.read_text(encoding="utf-8"))
    assert len(rows) >= 6, rows
    for what, path, names in rows:
        source = (ROOT / path).read_text(encoding="utf-8")
        for name in names:
            defined = rf"^(?:def|class) {name}\b|^{name}\b\s*(?::[^=\n]+)?=|^async def {name}\b"
            assert re.search(defined, source, re.M), f"README's 'where is {what}': {path} defines no {name}"
