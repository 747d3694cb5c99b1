"""The configuration reference is made from the config classes: docs/config.md is exactly what
``chess-rl config --markdown`` prints (it cannot drift from the code), every key of every section
is in it with the flag a phase's parser really has, and a wrong section name is one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.cli import main as cli_main
from pipelines.config import ChessRLConfig
from pipelines.config.reference import key_rows, reference_markdown, sections

DOC = Path(__file__).resolve().parents[2] / "docs" / "config.md"


def test_docs_config_md_is_the_generated_reference() -> None:
    assert DOC.read_text(encoding="utf-8") == reference_markdown(), (
        "docs/config.md differs from the config classes: run `chess-rl config --markdown > docs/config.md`"
    )


def test_every_key_is_listed_with_its_real_flag() -> None:
    from pipelines.common.phase import build_parser
    from pipelines.sft import PHASE as SFT

    listed = {row.key for s in sections() for row in key_rows(s)}
    for section, field in ChessRLConfig.model_fields.items():
        assert {f"{section}.{name}" for name in field.annotation.model_fields} <= listed  # type: ignore[union-attr]
    parser, _ = build_parser(SFT)
    options = {o for action in parser._actions for o in action.option_strings}
    for row in key_rows("sft") + key_rows("run"):
        assert row.flag == "--set" or row.flag in options, row


def test_the_command_prints_a_section_and_refuses_an_unknown_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["config", "annotate"]) == 0
    out = capsys.readouterr().out
    assert "annotate.whole_games (--whole-games) bool = false" in out and "sft." not in out
    assert cli_main(["config", "sft", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown section 'nope'" in err[0] and "annotate" in err[0]


#: What the preset a bare command loads sets apart from the defaults: selfplay's seed flags keep
#: the seed's defaults (tests/unit/test_selfplay_config.py), the tiny preset sizes them for 2 CPUs.
PRESET_OVER_SEED_FLAGS = {
    "selfplay.episodes": 16,
    "selfplay.batch_size": 128,
    "selfplay.checkpoint_interval": 3,
    "selfplay.exploration_rate": 0.25,
    "selfplay.producer_workers": 1,
}


def test_a_bare_command_runs_the_defaults_this_reference_shows() -> None:
    """The preset a phase loads without --config resolves to the classes' defaults, the default
    column of docs/config.md, every key but selfplay's seed flags, whose meaning names the value
    the preset gives them: what the reference shows is what a bare ``chess-rl <phase>`` runs."""
    import re

    from cluster.config import flatten, load_config, resolve_preset
    from pipelines.common.phase import build_parser
    from pipelines.sft import PHASE as SFT

    parser, _ = build_parser(SFT)
    ran = flatten(load_config(ChessRLConfig, path=resolve_preset(parser.get_default("config"))))
    shown = flatten(ChessRLConfig())
    assert ran.keys() == shown.keys()
    assert {key: value for key, value in ran.items() if value != shown[key]} == PRESET_OVER_SEED_FLAGS
    meaning = {row.key: row.help for row in key_rows("selfplay")}
    for key, value in PRESET_OVER_SEED_FLAGS.items():
        assert re.search(rf"the tiny preset: {value}\b", meaning[key]), (key, meaning[key])
