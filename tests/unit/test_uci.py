"""The lean UCI client's parsing of what Stockfish prints (no engine needed)."""

from __future__ import annotations

import chess
import chess.engine

from chessrl.engine.uci import _parse_info, _parse_option


def test_spin_option_with_range() -> None:
    option = _parse_option("option name UCI_Elo type spin default 1350 min 1350 max 2850")
    assert (option.name, option.type, option.default, option.min, option.max) == (
        "UCI_Elo",
        "spin",
        1350,
        1350,
        2850,
    )


def test_option_names_with_spaces_check_and_combo() -> None:
    skill = _parse_option("option name Skill Level type spin default 20 min 0 max 20")
    assert (skill.name, skill.default, skill.max) == ("Skill Level", 20, 20)
    ponder = _parse_option("option name Ponder type check default false")
    assert (ponder.type, ponder.default) == ("check", False)
    combo = _parse_option("option name Style type combo default Normal var Solid var Normal var Risky Play")
    assert combo.var == ["Solid", "Normal", "Risky Play"]
    path = _parse_option("option name SyzygyPath type string default <empty>")
    assert (path.type, path.default) == ("string", "<empty>")


def test_info_line_with_score_wdl_and_pv() -> None:
    board = chess.Board()
    info = _parse_info(
        "info depth 12 seldepth 15 multipv 2 score cp -31 wdl 20 900 80 nodes 20011 nps 900000 hashfull 3 "
        "tbhits 0 time 22 pv d2d4 d7d5 c2c4",
        board,
    )
    assert info["depth"] == 12 and info["multipv"] == 2 and info["nodes"] == 20011
    assert info["score"] == chess.engine.PovScore(chess.engine.Cp(-31), chess.WHITE)
    assert info["wdl"].pov(chess.WHITE).wins == 20
    assert [m.uci() for m in info["pv"]] == ["d2d4", "d7d5", "c2c4"]
    assert info["time"] == 0.022


def test_mate_score_bounds_and_a_pv_cut_at_the_first_illegal_move() -> None:
    board = chess.Board("6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1")
    info = _parse_info("info depth 5 score mate 1 lowerbound nodes 90 pv d1d8 e1e2", board)
    assert info["score"].pov(chess.WHITE).mate() == 1 and info["lowerbound"] is True
    assert [m.uci() for m in info["pv"]] == ["d1d8"]  # e1e2 is not a legal reply: dropped
    black = chess.Board("6k1/5ppp/8/8/8/8/5PPP/3R2K1 b - - 0 1")
    info = _parse_info("info depth 5 score cp 250 pv g8f8", black)
    assert info["score"].pov(chess.BLACK).score() == 250  # scores are from the side to move
