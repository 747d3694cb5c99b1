"""``python -m pipelines.uci``: a saved model runs as a real UCI engine in a subprocess, driven by
python-chess's own UCI client against Stockfish, and by raw malformed lines on its stdin."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import chess
import chess.engine
import pytest

from chessrl.engine.client import find_stockfish

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
#: Lines a UCI engine may write on stdout.
PROTOCOL = ("id ", "option ", "uciok", "readyok", "bestmove ", "info ")
#: The engine loads torch and the model before its handshake: generous on a busy 2-CPU machine.
STARTUP_S = 120.0


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from chessrl.lm.models import build_model

    model, tokenizer = build_model("tiny")  # untrained: its illegal proposals exercise --unmasked's fallback
    path = tmp_path_factory.mktemp("uci") / "tiny-model"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def engine_command(model: Path) -> list[str]:
    return [sys.executable, "-m", "pipelines.uci", "--model", str(model)]


def engine_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def test_a_complete_game_against_stockfish(model_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="chess.engine")
    board = chess.Board()
    ours = chess.engine.SimpleEngine.popen_uci(
        engine_command(model_dir), cwd=ROOT, env=engine_env(), timeout=STARTUP_S
    )
    try:
        assert ours.id["name"] == "chess-rl 0.1.0 (tiny-model)"
        assert ours.id["author"] == "chess-rl"
        assert "Temperature" in ours.options
        stockfish = chess.engine.SimpleEngine.popen_uci(find_stockfish())
        try:
            stockfish.configure({"Skill Level": 0})
            while not board.is_game_over(claim_draw=True) and board.ply() < 300:
                ours_to_move = board.turn == chess.WHITE
                engine = ours if ours_to_move else stockfish
                limit = chess.engine.Limit(time=0.5) if ours_to_move else chess.engine.Limit(nodes=50)
                result = engine.play(board, limit)
                assert result.move is not None and result.move in board.legal_moves, (
                    f"{'ours' if ours_to_move else 'stockfish'} played {result.move} in {board.fen()}"
                )
                board.push(result.move)
        finally:
            stockfish.quit()
        assert stockfish.returncode.result(timeout=30) == 0
    finally:
        ours.quit()
    assert ours.returncode.result(timeout=30) == 0
    assert board.is_game_over(claim_draw=True) or board.ply() == 300
    assert board.ply() >= 2
    # python-chess warns about any output it cannot read as UCI: stdout carried protocol lines only
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_malformed_input_is_answered_with_errors_and_the_engine_keeps_going(model_dir: Path) -> None:
    script = [
        "uci",
        "position fen not-a-fen",
        "go wtime abc",
        "position startpos moves e2e5",
        "foo",
        "isready",
        "quit",
    ]
    done = subprocess.run(
        engine_command(model_dir),
        input="\n".join(script) + "\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=engine_env(),
        timeout=STARTUP_S,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert all(line.startswith(PROTOCOL) for line in lines), lines
    assert lines[:2] == ["id name chess-rl 0.1.0 (tiny-model)", "id author chess-rl"]
    assert "uciok" in lines and lines[-1] == "readyok"
    errors = [line for line in lines if line.startswith("info string error: ")]
    assert len(errors) == 5, lines
    assert "bad FEN 'not-a-fen'" in errors[0]
    assert errors[1] == "info string error: go: wtime needs an integer, got 'abc'; ignored"
    assert errors[2] == "info string error: go without a position; searching the start position"
    assert "illegal move 'e2e5'" in errors[3]
    assert errors[4] == "info string error: unknown command 'foo'"
    (best,) = [line for line in lines if line.startswith("bestmove ")]
    assert chess.Move.from_uci(best.split()[1]) in chess.Board().legal_moves
    assert not [line for line in lines if "at random" in line], lines  # masked: never a random fallback


def test_the_engine_plays_the_masked_argmax_and_unmasked_only_when_asked(model_dir: Path) -> None:
    """What ``chess-rl uci`` plays is the player the project measures: the legal-masked argmax
    (the arena's masked player's move, no fallback); ``--unmasked`` keeps the checked proposal
    with its random fallback, said in an ``info string``."""
    from chessrl.arena.saved_models import load_saved_model
    from chessrl.engine.uci_server import SearchRequest
    from chessrl.lm.formats import get_format
    from chessrl.lm.masked import masked_move
    from pipelines.uci import LMPolicy

    model, tokenizer = load_saved_model(str(model_dir), "policy")
    said: list[str] = []
    fallbacks: list[str] = []
    masked = LMPolicy(model, tokenizer, info=said.append)
    unmasked = LMPolicy(model, tokenizer, masked=False, retries=0, info=fallbacks.append)
    board = chess.Board()
    for _ in range(6):
        move = masked(board, SearchRequest())
        expected = masked_move(
            model,
            tokenizer,
            board,
            [m.uci() for m in board.move_stack],
            get_format("moves"),
            avoid_draw_claims=True,
        ).moves[0]
        assert move == expected and chess.Move.from_uci(move) in board.legal_moves
        assert said == []
        assert chess.Move.from_uci(unmasked(board, SearchRequest())) in board.legal_moves
        board.push_uci(move)
    assert (
        said == [] and fallbacks and all("at random" in line for line in fallbacks)
    )  # untrained: it fell back


def test_a_bad_model_is_one_line_on_stderr_and_exit_code_2(tmp_path: Path) -> None:
    done = subprocess.run(
        engine_command(tmp_path / "missing"),
        input="uci\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=engine_env(),
        timeout=STARTUP_S,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"error: {tmp_path / 'missing'} is not a transformers checkpoint folder (no config.json)"
    ]
