"""pipelines.cli: the `chess-rl` entry point (no phase is run here)."""

from __future__ import annotations

import pytest

from chessrl import __version__
from pipelines.cli import PHASES, PLANNED, main, usage


@pytest.mark.parametrize("argv", [["--help"], ["-h"], ["help"], []])
def test_help_lists_the_phases_and_the_planned_ones(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: chess-rl <phase> [options]")
    lines = out.splitlines()
    phases_at, planned_at = lines.index("phases:"), lines.index("planned (not built yet):")
    assert phases_at < planned_at
    built = [line.split()[0] for line in lines[phases_at + 1 : planned_at] if line.strip()]
    planned = [line.split()[0] for line in lines[planned_at + 1 :] if line.startswith("  ")]
    assert built == [
        "prepare",
        "sft",
        "evaluate",
        "preferences",
        "reward",
        "ppo",
        "grpo",
        "selfplay",
        "rlaif",
        "uci",
    ]
    assert planned == list(PLANNED)
    assert "tune" in planned and "grpo" in built and "rlaif" in built
    assert (
        "PGN files (.pgn, .pgn.zst; local or s3://) and/or --generate N Stockfish games -> games Parquet"
        in out
    )


def test_no_phase_is_both_built_and_planned() -> None:
    assert not set(PHASES) & set(PLANNED)
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
        == "error: unknown phase 'prepar'; phases: prepare, sft, evaluate, preferences, reward, ppo, grpo, selfplay, rlaif, uci (chess-rl --help)\n"
    )


@pytest.mark.parametrize("phase", list(PLANNED))
def test_planned_phase_exits_2_and_names_the_phases_that_run(
    phase: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([phase, "--config", "tiny"]) == 2
    assert capsys.readouterr().err == (
        f"error: phase {phase!r} is planned but not built yet; phases that run: prepare, sft, evaluate, preferences, reward, ppo, grpo, selfplay, rlaif, uci\n"
    )
