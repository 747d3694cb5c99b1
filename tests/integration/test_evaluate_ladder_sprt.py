"""evaluate's measurement modes on the local Ray with real Stockfish and real games: the low Elo
ladder (rated once per storage and Stockfish build, then reused; a weak model gets a finite Elo
and no report shows nan or inf) and the SPRT A/B match (a clearly stronger player ends in H1, two
copies of one model in H0 or at --games; a match resumes, and is refused when its players changed)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from pipelines import evaluate
from pipelines.common.phase import EXIT_OK, EXIT_USER_ERROR

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
RUNGS = ["random", "stockfish:elo=1350,nodes=50,random=50", "stockfish:elo=1350,nodes=50"]


@pytest.fixture(scope="module")
def model_dir(tiny_lm_dir) -> Path:
    return tiny_lm_dir


def both(capsys) -> str:
    """What the driver printed: progress on stderr, the summary on stdout."""
    captured = capsys.readouterr()
    return captured.err + captured.out


def ladder_args(storage: Path, run: str, model_dir: Path) -> list[str]:
    return [
        "--config",
        "tiny",
        "--storage",
        str(storage),
        "--run-name",
        run,
        "--no-tracking",
        "--players",
        f"lm:{model_dir}",
        "random",
        "--games",
        "2",
        "--max-plies",
        "40",
        "--lm-retries",
        "0",
        "--quality-nodes",
        "0",
        "--suites",
        "--ladder-rungs",
        *RUNGS,
        "--ladder-games",
        "4",
        "--placement-games",
        "2",
        "--ladder-match-games",
        "2",
    ]


@pytest.mark.slow
def test_the_ladder_is_rated_once_reused_and_gives_a_finite_elo(tmp_path, model_dir, local_ray, capsys):
    assert evaluate.main(ladder_args(tmp_path, "a", model_dir)) == EXIT_OK
    out = both(capsys)
    [folder] = (tmp_path / "ladder").iterdir()
    ladder = json.loads((folder / "ladder.json").read_text())
    calibration = sorted(folder.glob("games/*/*.json"))
    assert len(calibration) == 2 * 4 and ladder["games"] == 8  # two neighbour pairs, four games each
    assert "ladder calibration: 8 games (0 already played, 8 to play)" in out
    assert ladder["ratings"]["stockfish:elo=1350,nodes=50"] == [1350.0] * 3
    assert "Stockfish" in ladder["stockfish"] and "sha256" in ladder["stockfish"]
    assert all(math.isfinite(v) for r in ladder["ratings"].values() for v in r)

    report_dir = tmp_path / "a" / "evaluate" / "eval"
    results = json.loads(
        (report_dir / "results.json").read_text(), parse_constant=pytest.fail
    )  # no NaN/Infinity
    candidate = results["ratings"][f"lm:{model_dir}"]
    assert candidate["elo"] is not None and candidate["low"] < candidate["elo"] < candidate["high"]
    assert results["ladder"]["candidate_games"] >= 3 * 2  # placement against every rung, plus more
    assert len(list((report_dir / "ladder-games").glob("*.json"))) == results["ladder_games"] >= 6
    report = (report_dir / "report.md").read_text()
    assert "The low Elo ladder" in report
    summary = out[out.index("evaluate summary") :]
    for text in (report, (report_dir / "results.json").read_text(), summary):
        assert "inf" not in text.replace("informative", "") and "nan" not in text.lower()
    assert f"Elo           {candidate['elo']:.0f} (" in out

    # A second evaluation on the same storage reuses the ladder: no calibration game is played.
    before = {p: p.stat().st_mtime_ns for p in calibration}
    assert evaluate.main(ladder_args(tmp_path, "b", model_dir)) == EXIT_OK
    out = both(capsys)
    assert "ladder: reusing" in out and "no ladder games to play" in out and "ladder calibration" not in out
    assert {p: p.stat().st_mtime_ns for p in sorted(folder.glob("games/*/*.json"))} == before
    assert json.loads((folder / "ladder.json").read_text()) == ladder

    # (a ladder.json that names another Stockfish build is rated again: unit/test_arena.py)


def sprt_args(storage: Path, a: str, b: str, *extra: str) -> list[str]:
    return [
        "--config",
        "tiny",
        "--storage",
        str(storage),
        "--run-name",
        "s",
        "--no-tracking",
        "--mode",
        "sprt",
        "--players",
        a,
        b,
        "--max-plies",
        "40",
        "--quality-nodes",
        "0",
        "--suites",
        *extra,
    ]


def test_sprt_accepts_h1_for_a_clearly_stronger_player_and_resumes(tmp_path, local_ray, capsys):
    strong, weak = "stockfish:skill=0,nodes=1", "random"
    # first only 4 games: undecided, the match ends at --games
    assert evaluate.main(sprt_args(tmp_path, strong, weak, "--elo1", "200", "--games", "4")) == EXIT_OK
    folder = tmp_path / "s" / "evaluate" / "eval"
    first = json.loads((folder / "results.json").read_text())["sprt"]
    assert (first["decision"], first["games"], first["pairs"]) == ("continue", 4, 2)
    capsys.readouterr()
    # the same match with room for more games resumes: the 4 games are kept, and it ends in H1
    assert evaluate.main(sprt_args(tmp_path, strong, weak, "--elo1", "200", "--games", "60")) == EXIT_OK
    out = both(capsys)
    assert "(4 already played, 56 to play)" in out and "decision      H1" in out
    result = json.loads((folder / "results.json").read_text(), parse_constant=pytest.fail)["sprt"]
    assert result["decision"] == "H1" and result["llr"] >= result["upper"] == pytest.approx(math.log(19))
    assert 4 < result["games"] < 60 and sum(result["pentanomial"]) == result["pairs"] == result["games"] // 2
    assert (
        result["wins"] > result["losses"]
        and result["elo"] > 0
        and len(result["trajectory"]) == result["pairs"]
    )
    # every game of the match is on storage and in the PGN; the plot of the LLR is there
    assert len(list((folder / "games").glob("*.json"))) >= result["games"]
    assert (folder / "games.pgn").read_text().count("[Event ") >= result["games"]
    assert (folder / "llr.png").stat().st_size > 1000 and "H1 accepted" in (folder / "report.md").read_text()
    # the same run name with another player is refused, not resumed with the other player's games
    saved = {p.name: p.read_bytes() for p in (folder / "games").glob("*.json")}
    capsys.readouterr()
    changed = sprt_args(tmp_path, "stockfish:skill=0,nodes=2", weak, "--elo1", "200", "--games", "60")
    assert evaluate.main(changed) == EXIT_USER_ERROR
    assert "the players changed since that game was played" in both(capsys)
    assert {p.name: p.read_bytes() for p in (folder / "games").glob("*.json")} == saved


def test_sprt_of_two_copies_of_one_model_is_not_h1(tmp_path, model_dir, random_games, local_ray, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(model_dir, copy)
    games = random_games(tmp_path / "games")  # the openings: plies 6-12 of its held-out games
    args = sprt_args(
        tmp_path,
        f"lm:{model_dir}",
        f"lm:{copy}",
        "--elo1",
        "100",
        "--games",
        "16",
        "--lm-retries",
        "0",
        "--positions-from",
        str(games),
        "--set",
        "sft.heldout_fraction=0.5",
        "--seed",
        "3",
    )
    assert evaluate.main(args) == EXIT_OK
    folder = tmp_path / "s" / "evaluate" / "eval"
    results = json.loads((folder / "results.json").read_text())
    expected = {"source": "heldout", "seed": 3, "plies": [6, 12], "from": str(games), "count": 8}
    assert results["openings"] == expected
    assert results["training_opponents"] == {} and results["notes"] == []
    assert f"openings: 8 positions at plies 6-12 of held-out games of {games}, seed 3" in both(capsys)
    assert "Openings: 8 positions at plies 6-12" in (folder / "report.md").read_text()
    result = results["sprt"]
    assert result["decision"] in ("H0", "continue")
    assert result["decision"] == "H0" or result["games"] == 16
    assert result["llr"] < result["upper"]
