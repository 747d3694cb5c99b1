"""pipelines.cli: the `chess-rl` entry point (no phase is run here)."""

from __future__ import annotations

import pytest

from chessrl import __version__
from pipelines.cli import PHASES, main, usage


@pytest.mark.parametrize("argv", [["--help"], ["-h"], ["help"], []])
def test_help_lists_the_phases(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: chess-rl <phase> [options]")
    lines = out.splitlines()
    phases_at = lines.index("phases:")
    end = lines.index("", phases_at)
    built = [line.split()[0] for line in lines[phases_at + 1 : end]]
    assert built == [
        "prepare",
        "annotate",
        "sft",
        "evaluate",
        "preferences",
        "reward",
        "ppo",
        "grpo",
        "dpo",
        "selfplay",
        "rlaif",
        "tune",
        "config",
        "uci",
    ]
    assert "planned" not in out
    assert (
        "PGN files (.pgn, .pgn.zst; local or s3://) and/or --generate N Stockfish games -> games Parquet"
        in out
    )


def test_every_phase_is_a_pipelines_module() -> None:
    assert all(module.startswith("pipelines.") for module, _ in PHASES.values())


def test_usage_aligns_the_descriptions() -> None:
    rows = [line for line in usage().splitlines() if line.startswith("  ") and not line.startswith("   ")]
    starts = {len(line) - len(line[2:].split(None, 1)[1]) for line in rows}
    assert len(starts) == 1


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"chess-rl {__version__}\n"


def test_unknown_phase_exits_2_and_says_what_exists(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["prepar"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert (
        captured.err
        == "error: unknown phase 'prepar'; phases: prepare, annotate, sft, evaluate, preferences, reward, ppo, grpo, dpo, selfplay, rlaif, tune, config, uci (chess-rl --help)\n"
    )
