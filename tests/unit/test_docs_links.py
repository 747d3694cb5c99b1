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
MAX_README_LINES = 250

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
