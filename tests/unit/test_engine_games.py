"""The corpus generator's logic, with a scripted stand-in for the engine (real Stockfish runs in
tests/integration/test_generate.py)."""

from __future__ import annotations

import random

import chess
import pytest

from chessrl.engine.client import Analysis, Line, Score, SearchLimit
from chessrl.engine.engine_games import EngineGame, GeneratorSettings, choose_move, generate_games


def lines(*pairs: tuple[str, int]) -> Analysis:
    return Analysis(fen="", lines=tuple(Line(m, Score(cp=cp, mate=None), (m,)) for m, cp in pairs))


def first_legal(fens, limits, multipv):
    """Deterministic stand-in: the alphabetically first legal move, scored 0."""
    out = []
    for fen in fens:
        board = chess.Board(fen)
        move = min(m.uci() for m in board.legal_moves)
        out.append(lines((move, 0)))
    return out


def test_temperature_zero_takes_the_best_line() -> None:
    a = lines(("e2e4", 30), ("d2d4", 25), ("a2a3", -200))
    assert {choose_move(a, 0.0, random.Random(i)) for i in range(50)} == {"e2e4"}


def test_sampling_prefers_better_lines_and_never_picks_hopeless_ones() -> None:
    a = lines(("e2e4", 30), ("d2d4", 20), ("g1h3", -900))
    picks = [choose_move(a, 0.3, random.Random(i)) for i in range(400)]
    assert picks.count("e2e4") > picks.count("d2d4") > 0
    assert "g1h3" not in picks


def test_openings_are_seeded_and_vary_between_games() -> None:
    s = GeneratorSettings(games=20, seed=11)
    first = [EngineGame.start(i, s).moves for i in range(20)]
    again = [EngineGame.start(i, s).moves for i in range(20)]
    other = [EngineGame.start(i, GeneratorSettings(games=20, seed=12)).moves for i in range(20)]
    assert first == again
    assert first != other
    assert len({" ".join(m) for m in first}) == 20
    assert all(2 <= len(m) <= 8 for m in first)


def test_each_side_draws_its_strength_from_the_levels() -> None:
    s = GeneratorSettings(games=40, seed=1, nodes_levels=(100, 300), temperature=(0.0, 0.4))
    games = [EngineGame.start(i, s) for i in range(40)]
    assert {g.white.nodes for g in games} | {g.black.nodes for g in games} == {100, 300}
    assert all(0.0 <= g.white.temperature <= 0.4 for g in games)
    assert games[0].limit() == SearchLimit(nodes=games[0].white.nodes)  # white moves first


def test_adjudication_after_a_run_of_lopsided_scores() -> None:
    s = GeneratorSettings(games=1, seed=3, resign_cp=800, resign_plies=4, random_plies=(0, 0))
    game = EngineGame.start(0, s)
    applied = 0
    while not game.finished and applied < 10:
        applied += 1
        board = game.board
        move = min(m.uci() for m in board.legal_moves)
        # +1000 for White whoever is to move: from the mover's side that is +1000 or -1000
        cp = 1000 if board.turn == chess.WHITE else -1000
        game.apply(lines((move, cp)))
    assert game.finished and (game.result, game.termination) == ("1-0", "adjudication")
    assert applied == 4 and len(game.moves) == 3  # the 4th lopsided score ends it before a move


def test_max_plies_ends_in_a_draw_and_the_record_is_well_formed() -> None:
    s = GeneratorSettings(games=3, seed=5, max_plies=12, concurrent_games=2)
    games = list(generate_games(s, first_legal))
    assert sorted(g.index for g in games) == [0, 1, 2]
    for game in games:
        record = game.record()
        assert record.n_plies == len(record.moves.split()) <= 12
        assert record.source == "stockfish" and record.white.startswith("Stockfish nodes=")
        if game.termination == "max_plies":
            assert record.result == "1/2-1/2"
        board = chess.Board()
        for uci in record.moves.split():
            board.push_uci(uci)  # legal all the way
        assert "PlyCount" in game.pgn()


def test_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="random_plies"):
        GeneratorSettings(games=1, random_plies=(3, 1))
    with pytest.raises(ValueError, match="games must be"):
        GeneratorSettings(games=0)
