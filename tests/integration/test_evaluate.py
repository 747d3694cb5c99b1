"""evaluate on the local Ray with real Stockfish: a tiny language model plays 4 games against
RandomPlayer and 4 against Stockfish Skill Level 0, games as parallel Ray tasks; every PGN parses
back; a run killed halfway resumes and finishes with the right number of games; bad input is one
clear message."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import chess
import chess.pgn
import pytest

from pipelines import evaluate
from pipelines.common.phase import EXIT_OK, EXIT_USER_ERROR

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def model_dir(tiny_lm_dir) -> Path:
    return tiny_lm_dir


def args(storage: Path, model_dir: Path, *extra: str, games: int = 8) -> list[str]:
    return [
        "--config",
        "tiny",
        "--storage",
        str(storage),
        "--run-name",
        "e",
        "--no-tracking",
        "--players",
        f"lm:{model_dir}",
        "random",
        "stockfish:skill=0,nodes=50",
        "--games",
        str(games),
        "--max-plies",
        "40",
        "--quality-nodes",
        "200",
        "--suites",
        "tests/data/epd/bratko-kopec.epd",
        "--no-ladder",
        *extra,
    ]


def pgn_games(path: Path) -> list[chess.pgn.Game]:
    """Every game of a PGN file, each read back without errors, legal move by move, with a result
    and two different players."""
    handle = io.StringIO(path.read_text())
    games = []
    while (game := chess.pgn.read_game(handle)) is not None:
        assert not game.errors, game.errors
        board = game.board()
        for move in game.mainline_moves():
            assert move in board.legal_moves
            board.push(move)
        assert game.headers["Result"] in ("1-0", "0-1", "1/2-1/2")
        assert game.headers["White"] != game.headers["Black"]
        games.append(game)
    return games


def test_match_against_random_and_stockfish(tmp_path, model_dir, local_ray, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert evaluate.main(args(tmp_path, model_dir, games=4)) == EXIT_OK
    out = capsys.readouterr().out
    assert "evaluate summary" in out and "report" in out
    folder = tmp_path / "e" / "evaluate" / "eval"
    assert len(list((folder / "games").glob("*.json"))) == 8
    results = json.loads((folder / "results.json").read_text())
    assert results["games"] == 8
    # no run, so no games table: random openings, said once, and recorded
    assert results["openings"]["source"] == "random" and results["openings"]["count"] == 2
    assert "no games table at" in results["openings"]["fallback"] and results["training_opponents"] == {}
    for opponent in ("random", "stockfish:skill=0,nodes=50"):
        p = results["pairings"][opponent]
        assert p["wins"] + p["draws"] + p["losses"] == 4
        assert 0.0 <= p["score"] <= 1.0
    moves = results["candidate_moves"]
    assert moves["moves"] > 0 and 0.0 <= moves["legal_rate"] <= 1.0
    assert results["suites"][0]["positions"] == 24 and results["quality"]["moves"] == moves["moves"]
    assert len(pgn_games(folder / "games.pgn")) == 8
    report = (folder / "report.md").read_text()
    assert "| random |" in report and (folder / "score.png").stat().st_size > 1000
    assert "Openings: 2 positions of 4 seeded random plies, seed " in report
    assert (folder / "elo.png").is_file()


@pytest.mark.slow
def test_killed_evaluation_resumes_with_the_right_number_of_games(tmp_path, model_dir, killed_run):
    command = [
        sys.executable,
        "-m",
        "pipelines.evaluate",
        *args(tmp_path, model_dir, "--set", "ray.num_cpus=2", "--quality-nodes", "0", "--suites", games=6),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_ADDRESS": ""}
    games = tmp_path / "e" / "evaluate" / "eval" / "games"
    with killed_run(command, env=env) as run:
        run.wait_for(lambda: games.is_dir() and len(list(games.glob("*.json"))) >= 4, timeout=300, poll=0.1)
        assert run.running, "the evaluation ended before it could be killed"
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in games.glob("*.json")}
    played = len(before)
    assert 4 <= played < 12
    rerun = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"{played} already played, {12 - played} to play" in rerun.stdout + rerun.stderr
    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in games.glob("*.json")}
    assert len(after) == 12
    # the games played before the kill were not played again: each file as it was, not rewritten
    assert {name: after[name] for name in before} == before
    assert json.loads((games.parent / "results.json").read_text())["games"] == 12


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--players", "random"], "at least two players"),
        (["--players", "random", "stockfsh"], "evaluate.players"),
        (["--players", "random", "random"], "names a player twice"),
        (["--players", "sft", "random"], "run `chess-rl sft` first"),
        (["--players", "random", "stockfish:elo=3100"], "UCI_Elo"),
        (["--players", "random", "uci:/nonexistent/engine"], "no engine at"),
        (["--players", "random", "lm:/nonexistent/model"], "not a saved model folder"),
        (["--players", "mcts", "random"], "run `chess-rl selfplay` first"),
        (["--players", "random", "mcts:/nonexistent/best.pt"], "no network file at"),
        (["--players", "random", "random:x"], "evaluate.players"),
        (["--openings", "/nonexistent/book.epd", "--players", "random", "stockfish"], "does not exist"),
        (["--suites", "/nonexistent.epd", "--players", "random", "stockfish"], "does not exist"),
        (["--games", "1"], "games"),
        (["--players", "random", "stockfish", "--pairs", "0-2"], "there are 2 players"),
        (["--players", "random", "stockfish", "--pairs", "0-0"], "two different player indices"),
        (["--players", "random", "stockfish", "--pairs", "1-0", "0-1"], "there twice"),
        (
            ["--mode", "sprt", "--players", "random", "stockfish", "--pairs", "0-1"],
            "--mode sprt pairs its players",
        ),
        (
            ["--mode", "paired", "--players", "lm:/a", "lm:/b", "--pairs", "0-1"],
            "--mode paired pairs its players",
        ),
        (
            ["--mode", "paired", "--players", "lm:/a", "stockfish"],
            "compares models' moves (lm:DIR, sft or judge:DIR), not stockfish",
        ),
        (
            ["--mode", "paired", "--players", "lm:/a", "lm:/b", "--quality-nodes", "0"],
            "give it more than 0 nodes",
        ),
        (["--mode", "paired", "--players", "lm:/a", "lm:/b", "--positions", "1"], "evaluate.positions"),
        (["--mode", "sprt", "--players", "random", "stockfish", "stockfish:skill=0"], "exactly two players"),
        (["--mode", "sprt", "--players", "random"], "exactly two players"),
        (
            ["--mode", "sprt", "--players", "random", "stockfish", "--elo0", "20", "--elo1", "20"],
            "elo0 must be below elo1",
        ),
        (
            ["--mode", "sprt", "--players", "random", "stockfish", "--elo0", "30", "--elo1", "10"],
            "elo0 must be below elo1",
        ),
        (["--mode", "sprt", "--players", "random", "stockfish", "--alpha", "0.5"], "evaluate.alpha"),
        (["--mode", "sprt", "--players", "random", "stockfish", "--alpha", "0"], "evaluate.alpha"),
        (["--mode", "sprt", "--players", "random", "stockfish", "--beta", "-0.1"], "evaluate.beta"),
        (
            ["--players", "random", "stockfish", "--ladder-rungs", "random", "stockfish:skill=0"],
            "anchored rung",
        ),
        (
            ["--players", "random", "stockfish", "--ladder-rungs", "random", "stockfish:elo=1350,random=101"],
            "percentage",
        ),
    ],
)
def test_bad_input_is_one_clear_message(tmp_path, local_ray, capsys, extra, message):
    code = evaluate.main(
        ["--config", "tiny", "--storage", str(tmp_path), "--no-tracking", "--quality-nodes", "0", *extra]
    )
    err = capsys.readouterr().err
    assert code == EXIT_USER_ERROR, err
    assert "Traceback" not in err and message in err


def test_a_selfplay_network_plays_in_the_arena(tmp_path, local_ray, capsys, monkeypatch):
    import torch

    from chessrl.search.network import NetConfig, PolicyValueNet

    monkeypatch.chdir(ROOT)
    net = NetConfig(blocks=1, channels=8, history=2, value_hidden=8)
    path = tmp_path / "best.pt"
    torch.save({"model": PolicyValueNet(net).state_dict(), "net": net.__dict__, "version": 3}, path)
    code = evaluate.main(
        [
            "--config",
            "tiny",
            "--storage",
            str(tmp_path),
            "--run-name",
            "m",
            "--no-tracking",
            "--players",
            f"mcts:{path},sims=4",
            "random",
            "--games",
            "4",
            "--max-plies",
            "30",
            "--quality-nodes",
            "0",
            "--suites",
            "tests/data/epd/bratko-kopec.epd",
            "--no-ladder",
        ]
    )
    assert code == EXIT_OK, capsys.readouterr().err[-2000:]
    results = json.loads((tmp_path / "m" / "evaluate" / "eval" / "results.json").read_text())
    pairing = results["pairings"]["random"]
    assert pairing["wins"] + pairing["draws"] + pairing["losses"] == 4


def test_a_judge_plays_in_the_arena_and_a_policy_is_no_judge(
    tmp_path, model_dir, random_games, local_ray, capsys, monkeypatch
):
    """``judge:DIR``: a reward model plays its best legal move in evaluate's games (PGN named by
    the spec) and in the paired measure (legal everywhere, read in its own format); a policy
    folder given as a judge is one clear message before Ray starts."""
    from chessrl.rl.reward import build_reward_model

    monkeypatch.chdir(ROOT)
    judge, tok = build_reward_model("tiny")
    judge.config.chessrl_text_format = "board"
    judge.save_pretrained(tmp_path / "judge")
    tok.save_pretrained(tmp_path / "judge")
    common = [
        "--config",
        "tiny",
        "--storage",
        str(tmp_path),
        "--run-name",
        "j",
        "--no-tracking",
        "--no-ladder",
    ]
    common += ["--games", "2", "--max-plies", "10", "--quality-nodes", "0", "--suites"]
    code = evaluate.main([*common, "--players", f"judge:{model_dir}", "random"])
    assert code == EXIT_USER_ERROR and "a judge: player plays a reward model" in capsys.readouterr().err
    assert evaluate.main([*common, "--players", f"judge:{tmp_path / 'judge'}", "random"]) == EXIT_OK
    capsys.readouterr()
    games = pgn_games(tmp_path / "j" / "evaluate" / "eval" / "games.pgn")
    assert len(games) == 2
    assert {g.headers["White"] for g in games} | {g.headers["Black"] for g in games} == {
        f"judge:{tmp_path / 'judge'}",
        "random",
    }
    paired = [
        *common[:7],
        "--mode",
        "paired",
        "--quality-nodes",
        "50",
        "--positions",
        "6",
        "--name",
        "paired",
    ]
    paired += ["--positions-from", str(random_games(tmp_path / "games")), "--set", "sft.heldout_fraction=0.5"]
    assert evaluate.main([*paired, "--players", f"judge:{tmp_path / 'judge'}", f"lm:{model_dir}"]) == EXIT_OK
    capsys.readouterr()
    results = json.loads((tmp_path / "j" / "evaluate" / "paired" / "results.json").read_text())
    assert results["positions"] == 6 and results["start_unmasked_legal"] == 1.0
    assert 0.0 <= results["runs"][f"lm:{model_dir}"]["start"] <= 1.0


def test_paired_mode_gives_each_run_its_gain_over_the_start_and_their_mean(
    tmp_path, model_dir, random_games, local_ray, capsys
):
    """Three tiny models on the same held-out positions: a copy of the start gains exactly 0 with
    the same move everywhere; the mean over the two runs is the mean of their gains; the report and
    the summary say so. A table that is not there is one line naming --positions-from."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    copy, changed = tmp_path / "copy", tmp_path / "changed"
    model, tokenizer = (
        AutoModelForCausalLM.from_pretrained(model_dir),
        AutoTokenizer.from_pretrained(model_dir),
    )
    for folder in (copy, changed):
        if folder == changed:
            torch.manual_seed(0)
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(0.5 * torch.randn_like(p))
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    games = random_games(tmp_path / "games")
    common = [
        "--config",
        "tiny",
        "--storage",
        str(tmp_path),
        "--run-name",
        "p",
        "--no-tracking",
        "--mode",
        "paired",
        "--players",
        f"lm:{model_dir}",
        f"lm:{copy}",
        f"lm:{changed}",
        "--quality-nodes",
        "50",
    ]
    assert evaluate.main([*common, "--positions-from", str(tmp_path / "none")]) == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert "evaluate.positions_from (--positions-from): no games at" in err and "Traceback" not in err

    assert (
        evaluate.main(
            [
                *common,
                "--positions-from",
                str(games),
                "--positions",
                "12",
                "--set",
                "sft.heldout_fraction=0.5",
            ]
        )
        == EXIT_OK
    )
    out = capsys.readouterr().out
    folder = tmp_path / "p" / "evaluate" / "eval"
    results = json.loads((folder / "results.json").read_text())
    assert (
        results["mode"] == "paired" and results["start"] == f"lm:{model_dir}" and results["positions"] == 12
    )
    assert 3 <= results["games"] <= 12 and results["per_game"] == 4  # at most 4 positions a game
    same, other = results["runs"][f"lm:{copy}"], results["runs"][f"lm:{changed}"]
    assert (
        same["gain"] == same["low"] == same["high"] == 0.0 and same["same_move"] == same["equal_loss"] == 12
    )
    assert same["start"] == same["final"] == other["start"]  # one start, scored once
    assert other["same_move"] < 12 and other["low"] <= other["gain"] <= other["high"]
    over = results["over_runs"]
    assert over["runs"] == 2 and over["gain"] == pytest.approx(other["gain"] / 2)
    assert over["low"] < over["gain"] < over["high"] and over["run_sd"] == pytest.approx(
        abs(other["gain"]) / 2**0.5
    )
    assert "evaluate summary (paired)" in out and "over 2 runs" in out
    assert "| player | loss (start -> player) |" in (folder / "report.md").read_text()
