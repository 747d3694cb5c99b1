"""The grade's value scale (:mod:`chessrl.engine.move_value`): ``margin`` keeps ranking moves once
a game is won, where ``expected`` is flat; the rules decide what the engine, given a FEN, cannot see."""

from __future__ import annotations

import chess
import pytest

from chessrl.engine.client import Score
from chessrl.engine.move_value import CLIP_CP, move_value, position_value
from chessrl.rl.ppo import scaled_grades

#: Stockfish-like scores of the positions after each move below, for the side to move there.
QUEEN_TAKEN = Score(cp=-1100, mate=None, wdl=(0, 2, 998))  # White took the queen: Black is lost
BLACK_LOST = Score(cp=-700, mate=None, wdl=(0, 8, 992))


def after(fen: str, *moves: str) -> chess.Board:
    board = chess.Board(fen)
    for move in moves:
        board.push_uci(move)
    return board


def test_a_mate_in_one_ranks_above_winning_a_queen_by_more_than_noise() -> None:
    # a back-rank mate (Rd8#) against taking a hanging queen (Rxd5), both White's
    mate = after("6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1", "d1d8")
    queen = after("4k3/8/8/3q4/8/8/3R4/4K3 w - - 0 1", "d2d5")
    assert mate.is_checkmate() and not queen.is_game_over()
    flat = move_value(mate, None, "expected") - move_value(queen, QUEEN_TAKEN, "expected")
    steep = move_value(mate, None, "margin") - move_value(queen, QUEEN_TAKEN, "margin")
    assert 0 <= flat < 0.005  # the old grade: a mate and a won queen are the same 1.0
    assert steep > 0.1  # the margin: well above the dead zone (0.02) and Stockfish's noise
    # and a longer mate ranks between them, a shorter one above a longer one
    mate_in = [move_value(chess.Board(), Score(cp=None, mate=-k), "margin") for k in (1, 3, 10)]
    assert mate_in[0] > mate_in[1] > mate_in[2] > move_value(queen, QUEEN_TAKEN, "margin")


def test_in_a_won_position_a_repetition_ranks_below_progress() -> None:
    # White a rook up; the king shuffles g1-f1 twice, then has the choice again
    start = "6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1"
    seen = ["g1f1", "g8f8", "f1g1", "f8g8", "g1f1", "g8f8", "f1g1", "f8g8"]
    repeat, progress = after(start, *seen, "g1f1"), after(start, *seen, "h2h4")
    assert repeat.is_repetition(3) and not progress.is_repetition(3)
    assert move_value(repeat, BLACK_LOST, "expected") == move_value(progress, BLACK_LOST, "expected")
    assert move_value(repeat, BLACK_LOST, "margin") == 0.5 < move_value(progress, BLACK_LOST, "margin") - 0.3
    # a stalemate in a won position is the draw it is on both scales (Stockfish sees it)
    stalemate = after("7k/8/5Q1K/8/8/8/8/8 w - - 0 1", "f6g6")
    assert stalemate.is_stalemate() and move_value(stalemate, None, "margin") == 0.5
    # the grade PPO and GRPO give: the repetition keeps almost nothing of a won position's value
    grades = scaled_grades(
        [(seen, "g1f1"), (seen, "h2h4")],
        lambda fens: [Score(cp=700, mate=None, wdl=(992, 8, 0)) if " w " in f else BLACK_LOST for f in fens],
        "margin",
        start_fen=start,
    )
    assert grades[1] == 1.0 and grades[0] < 0.4


def test_the_margin_is_clipped_symmetric_and_bounded() -> None:
    up = position_value(Score(cp=CLIP_CP * 3, mate=None, wdl=(1000, 0, 0)), "margin")
    clip = position_value(Score(cp=CLIP_CP, mate=None, wdl=(1000, 0, 0)), "margin")
    down = position_value(Score(cp=-CLIP_CP * 3, mate=None, wdl=(0, 0, 1000)), "margin")
    assert up == clip and up + down == pytest.approx(1.0) and 0.0 <= down < 0.5 < up <= 1.0
    assert position_value(Score(cp=None, mate=1, wdl=(1000, 0, 0)), "margin") == 1.0
    with pytest.raises(ValueError, match="one of expected, margin"):
        position_value(Score(cp=0, mate=None), "linear")  # type: ignore[arg-type]
