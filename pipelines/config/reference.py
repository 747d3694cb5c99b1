"""Every configuration key, made from the config classes themselves: its section, flag, type,
default and docstring. ``chess-rl config [SECTION ...]`` prints it; ``chess-rl config
--markdown`` writes ``docs/config.md`` (a test holds the file to this output, so it cannot drift
from the code).

>>> print(reference_text(["run"]).splitlines()[0])
run: What this invocation is called and where it writes.
>>> rows = {r.key: r for r in key_rows("annotate")}
>>> rows["annotate.nodes"].flag, rows["annotate.nodes"].default, rows["annotate.nodes"].type
('--nodes', '100', 'int')
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from pipelines.config import ChessRLConfig

#: The sections every phase shares (the others are named after their phase).
SHARED = ("run", "ray", "tracking")


@dataclass(frozen=True)
class KeyRow:
    """One key: ``section.name``, its ``--flag`` (``--set`` where it has none), type, default (as
    JSON shows it) and help."""

    key: str
    flag: str
    type: str
    default: str
    help: str


def sections() -> list[str]:
    """Every section of a preset, in the config's order."""
    return list(ChessRLConfig.model_fields)


def section_class(section: str) -> type[BaseModel]:
    """The class of ``section`` (a ValueError naming the sections for another name)."""
    field = ChessRLConfig.model_fields.get(section)
    if field is None:
        raise ValueError(f"unknown section {section!r}; sections: {', '.join(sections())}")
    cls = field.annotation
    assert isinstance(cls, type) and issubclass(cls, BaseModel)
    return cls


def _type_text(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    text = text or str(annotation)
    text = re.sub(r"\b(typing|pipelines\.config\.\w+|cluster\.config)\.", "", text)
    # a model path (cluster.config.ModelPath): a str, made absolute when local
    text = re.sub(
        r"Optional\[Annotated\[str, AfterValidator\(func=<function absolute_local_path[^>]*>\)\]\]",
        "str | None (a local path is made absolute)",
        text,
    )
    return text.replace("NoneType", "None")


def _default_text(field: Any) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
    elif field.default is PydanticUndefined:
        return "(required)"
    else:
        value = field.default
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    try:
        return json.dumps(value, sort_keys=True) if not isinstance(value, str) else value
    except TypeError:
        return str(value)


def flags_of(section: str) -> dict[str, str]:
    """``{section.key: --flag}`` as a phase's parser makes them (:func:`pipelines.common.phase.build_parser`:
    the common flags of ``run``, ``ray`` and ``tracking``, one a scalar or list key of the
    phase's own section); a key without one is set with ``--set`` or in a preset."""
    from types import SimpleNamespace

    from pipelines.common.phase import build_parser

    owner = "prepare" if section in SHARED else section  # any phase's parser has the common flags
    stand_in = SimpleNamespace(
        name=owner, section=owner, section_model=section_class(owner), summary="", description=""
    )
    _, mapping = build_parser(stand_in)  # type: ignore[arg-type]
    flags = {key: flag for key, flag in mapping.values() if key.startswith(f"{section}.")}
    if section == "ray":  # read apart from the config (RAY_ADDRESS wins over it)
        flags["ray.address"] = "--address"
    return flags


def key_rows(section: str) -> list[KeyRow]:
    """Every key of ``section``, in its class's order."""
    cls = section_class(section)
    flags = flags_of(section)
    return [
        KeyRow(
            key=f"{section}.{name}",
            flag=flags.get(f"{section}.{name}", "--set"),
            type=_type_text(field.annotation),
            default=_default_text(field),
            help=" ".join((field.description or "").split()),
        )
        for name, field in cls.model_fields.items()
    ]


def reference_text(chosen: Sequence[str] | None = None) -> str:
    """The keys of ``chosen`` sections (all by default) as plain text, a paragraph a key."""
    out: list[str] = []
    for section in chosen or sections():
        doc = " ".join((section_class(section).__doc__ or "").split())
        out.append(f"{section}: {doc.split(': ', 1)[-1] if doc.startswith('``') else doc}")
        for row in key_rows(section):
            flag = row.flag if row.flag != "--set" else f"--set {row.key}=..."
            out.append(f"  {row.key} ({flag}) {row.type} = {row.default}")
            if row.help:
                out.append(f"      {row.help}")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def reference_markdown() -> str:
    """``docs/config.md``: a table a section, every key with its flag, type, default and help."""
    out = [
        "# Configuration reference",
        "",
        "Every key of every section, generated from the config classes (`pipelines/config/`,",
        "`cluster/config.py`) by `chess-rl config --markdown > docs/config.md`; a test fails when this",
        "file and the code differ. A preset (`configs/*.yaml`) sets any of these keys (YAML `section:",
        "key: value`); a phase's `--flag` or `--set section.key=value` overrides it for one run. The",
        "defaults below are the classes' and what a bare `chess-rl <phase>` runs: its preset, `tiny`,",
        "sets no key but five of selfplay's, whose defaults are the seed's flags (each says the",
        "preset's value). The other presets (`small`, `gpu`, `cluster`, `demo`, `judge`) set what differs.",
        "",
    ]
    for section in sections():
        doc = " ".join((section_class(section).__doc__ or "").split())
        doc = doc.replace("<", "&lt;").replace(">", "&gt;")
        out += [
            f"## `{section}`",
            "",
            doc,
            "",
            "| key | flag | type | default | meaning |",
            "|---|---|---|---|---|",
        ]
        for row in key_rows(section):
            meaning = row.help.replace("<", "&lt;").replace(">", "&gt;")  # <run> is text, not a tag
            cells = [f"`{row.key}`", f"`{row.flag}`", f"`{row.type}`", f"`{row.default}`", meaning]
            out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def main(argv: Sequence[str] | None = None, *, prog: str | None = None) -> int:
    """``chess-rl config [SECTION ...] [--markdown]``: exit 0, or 2 with one line for a wrong name."""
    parser = argparse.ArgumentParser(
        prog=prog or "chess-rl config",
        description="Every configuration key: its flag, type, default and meaning (from the config classes).",
    )
    parser.add_argument("sections", nargs="*", metavar="SECTION", help=f"any of: {', '.join(sections())}")
    parser.add_argument("--markdown", action="store_true", help="all sections as docs/config.md")
    args = parser.parse_args(argv)
    try:
        text = reference_markdown() if args.markdown else reference_text(args.sections)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
