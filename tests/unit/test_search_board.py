"""child_board against python-chess's copy + push: the same board, move stack and saved states
after every kind of move (ordinary, captures, double pushes, castling, en passant, promotions,
king moves, Chess960)."""

from __future__ import annotations

import random

import chess
import chess.variant
import pytest

from chessrl.search.search_board import child_board

STATE_FIELDS = (
    "pawns",
    "knights",
    "bishops",
    "rooks",
    "queens",
    "kings",
    "occupied_w",
    "occupied_b",
    "occupied",
    "promoted",
    "turn",
    "castling_rights",
    "ep_square",
    "halfmove_clock",
    "fullmove_number",
)


def assert_same(mine: chess.Board, theirs: chess.Board, deep: bool = True) -> None:
    assert type(mine) is type(theirs)
    for name in ("pawns", "knights", "bishops", "rooks", "queens", "kings", "occupied", "promoted"):
        assert getattr(mine, name) == getattr(theirs, name), name
    assert mine.occupied_co == theirs.occupied_co
    for name in ("turn", "castling_rights", "ep_square", "halfmove_clock", "fullmove_number", "chess960"):
        assert getattr(mine, name) == getattr(theirs, name), name
    assert mine.move_stack == theirs.move_stack
    assert len(mine._stack) == len(theirs._stack)
    for a, b in zip(mine._stack, theirs._stack, strict=True):
        assert [getattr(a, f) for f in STATE_FIELDS] == [getattr(b, f) for f in STATE_FIELDS]
    assert mine.fen() == theirs.fen()
    assert mine._transposition_key() == theirs._transposition_key()
    if not deep:  # the fields above are the whole state: what follows reads only them
        return
    assert list(mine.legal_moves) == list(theirs.legal_moves)
    assert mine.is_repetition(2) == theirs.is_repetition(2)


def games(count: int, seed: int, board: chess.Board | None = None) -> list[chess.Board]:
    """Every position of random games, with captures, checks and promotions preferred half the
    time (so castling, en passant and promotions come up often)."""
    rnd = random.Random(seed)
    out = []
    for _ in range(count):
        b = board.copy() if board is not None else chess.Board()
        for _ in range(rnd.randrange(20, 160)):
            moves = list(b.legal_moves)
            if not moves or b.is_game_over():
                break
            sharp = [
                m for m in moves if m.promotion or b.is_castling(m) or b.is_en_passant(m) or b.is_capture(m)
            ]
            b.push(rnd.choice(sharp) if sharp and rnd.random() < 0.5 else rnd.choice(moves))
            out.append(b.copy())
    return out


def test_every_kind_of_move_of_random_games_gives_python_chess_s_board() -> None:
    """Every castling, en passant, promotion, capture and king move of the games' positions, and
    one in three of their other moves."""
    kinds = {"castling": 0, "en_passant": 0, "promotion": 0, "capture": 0, "king": 0, "double": 0, "quiet": 0}
    positions = games(25, seed=3)
    assert len(positions) > 1200
    for n, board in enumerate(positions):
        for k, move in enumerate(board.legal_moves):
            kind = (
                "castling"
                if board.is_castling(move)
                else "en_passant"
                if board.is_en_passant(move)
                else "promotion"
                if move.promotion
                else "capture"
                if board.is_capture(move)
                else "king"
                if board.piece_type_at(move.from_square) == chess.KING
                else "double"
                if board.piece_type_at(move.from_square) == chess.PAWN
                and abs(move.to_square - move.from_square) == 16
                else "quiet"
            )
            if kind == "quiet" and (n + k) % 3:
                continue
            kinds[kind] += 1
            expected = board.copy()
            expected.push(move)
            assert_same(child_board(board, move), expected, deep=False)
    assert min(kinds.values()) >= 5, kinds


@pytest.mark.parametrize(
    "fen",
    [
        "r3k2r/8/8/8/8/8/8/R3K2R w KQkq - 0 1",  # rooks take rooks: castling rights go
        "r3k2r/8/8/8/8/8/8/R3K2R b KQkq - 0 1",
        "4k3/8/8/2pP4/8/8/8/4K3 w - c6 0 1",  # en passant
        "4k3/1P6/8/8/8/8/6p1/4K2R b K - 0 1",  # promotion onto a rook with castling rights
        "4k3/8/8/8/8/8/8/R3K3 w Q - 7 40",  # halfmove clock, fullmove number
        "8/8/8/8/8/8/8/k6K w - - 0 1",  # kings only
        "r3k2r/8/8/8/8/8/8/R2K3R w KQkq - 0 1",  # rights that cleaning drops (the king is off e1)
        "1r2k1r1/8/8/8/8/8/8/1R2K1R1 w KQkq - 0 1",  # rights with no rook in the corners
    ],
)
def test_hand_picked_positions(fen: str) -> None:
    board = chess.Board(fen)
    for move in board.legal_moves:
        expected = board.copy()
        expected.push(move)
        assert_same(child_board(board, move), expected)
        # and a second ply on the child, from a board with a move stack
        child = child_board(board, move)
        for reply in list(child.legal_moves)[:8]:
            expected2 = expected.copy()
            expected2.push(reply)
            assert_same(child_board(child, reply), expected2)


def test_a_promoted_piece_stays_promoted_when_it_moves() -> None:
    board = chess.Board("8/1P2k3/8/8/8/8/8/4K3 w - - 0 1")
    board.push_uci("b7b8q")
    board.push_uci("e7e6")
    assert board.promoted
    for move in board.legal_moves:
        expected = board.copy()
        expected.push(move)
        mine = child_board(board, move)
        assert_same(mine, expected)
        if board.piece_type_at(move.from_square) == chess.QUEEN:
            assert mine.promoted == 1 << move.to_square


def test_chess960_and_other_board_classes_go_through_python_chess() -> None:
    board = chess.Board.from_chess960_pos(518 - 100)
    for position in games(3, seed=4, board=board):
        for move in position.legal_moves:
            expected = position.copy()
            expected.push(move)
            assert_same(child_board(position, move), expected, deep=False)

    crazy = chess.variant.CrazyhouseBoard()
    crazy.push_uci("e2e4")
    move = chess.Move.from_uci("d7d5")
    expected = crazy.copy()
    expected.push(move)
    mine = child_board(crazy, move)
    assert type(mine) is chess.variant.CrazyhouseBoard and mine.fen() == expected.fen()


def test_a_null_move_goes_through_python_chess() -> None:
    board = chess.Board()
    expected = board.copy()
    expected.push(chess.Move.null())
    assert_same(child_board(board, chess.Move.null()), expected)


def test_the_parent_is_left_alone() -> None:
    board = chess.Board()
    for uci in ("e2e4", "d7d5"):
        board.push_uci(uci)
    before = (board.fen(), list(board.move_stack), len(board._stack), list(board.occupied_co))
    child_board(board, chess.Move.from_uci("e4d5"))
    assert (board.fen(), list(board.move_stack), len(board._stack), list(board.occupied_co)) == before
