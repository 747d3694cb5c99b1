"""The 8×8×73 move space round-trips every legal move, and the input planes hold what they say."""

from __future__ import annotations

import random

import chess
import numpy as np
import pytest

from chessrl.search.board_encoding import (
    NUM_ACTIONS,
    PLANES_PER_STEP,
    copy_board,
    encode_board,
    encode_boards,
    index_to_move,
    input_channels,
    legal_indices,
    legal_mask,
    legal_moves,
    move_to_index,
)

# Rule corners, each for both colours.
CORNERS = [
    # castling both ways for white; black may castle kingside only
    "r3k2r/pppppppp/8/8/8/8/PPPPPPPP/R3K2R w KQkq - 0 1",
    "r3k2r/pppppppp/8/8/8/8/PPPPPPPP/R3K2R b KQkq - 0 1",
    # castling through check is not legal (f1 / f8 attacked), the other side is
    "r3k2r/8/8/8/8/8/5r2/R3K2R w KQkq - 0 1",
    "r3k2r/5R2/8/8/8/8/8/R3K2R b KQkq - 0 1",
    # en passant: e5xf6 for white, d4xe3 for black
    "rnbqkbnr/ppp1p1pp/8/3pPp2/8/8/PPPP1PPP/RNBQKBNR w KQkq f6 0 3",
    "rnbqkbnr/pppp1ppp/8/8/3pP3/8/PPP2PPP/RNBQKBNR b KQkq e3 0 3",
    # promotions: push and both captures, to every piece
    "1n1n4/2P5/8/8/8/8/5p2/k3N1NK w - - 0 1",
    "1n1n3K/2P5/8/8/8/8/5p2/k3N1N1 b - - 0 1",
    # promotions on the edge files (a and h), where one capture direction leaves the board
    "1n4n1/P6P/8/8/3k4/8/p6p/1N4NK w - - 0 1",
    "1n4nk/P6P/8/8/3K4/8/p6p/1N4N1 b - - 0 1",
    # queen in the middle: all 8 directions at all distances
    "k7/8/8/8/3Q4/8/8/7K w - - 0 1",
    "7k/8/8/3q4/8/8/8/K7 b - - 0 1",
]


def random_positions(games: int, seed: int) -> list[chess.Board]:
    rng = random.Random(seed)
    positions = []
    for _ in range(games):
        board = chess.Board()
        while not board.is_game_over() and board.ply() < 160:
            positions.append(board.copy(stack=False))
            board.push(rng.choice(list(board.legal_moves)))
    return positions


def assert_round_trips(board: chess.Board) -> None:
    moves, indices = legal_indices(board)
    assert len(set(indices.tolist())) == len(moves), board.fen()
    for move, index in zip(moves, indices.tolist(), strict=True):
        assert move_to_index(board, move) == index, (board.fen(), move.uci())
        assert index_to_move(board, index) == move, (board.fen(), move.uci())
    mask = legal_mask(board)
    assert mask.shape == (NUM_ACTIONS,) and mask.dtype == bool
    assert int(mask.sum()) == board.legal_moves.count()


def test_every_legal_move_of_random_games_round_trips() -> None:
    positions = random_positions(games=30, seed=7)
    assert len(positions) >= 2000
    for board in positions:
        assert_round_trips(board)


# Pins, checks, en passant that would expose the king, promotions with captures, castling.
PIN_AND_CHECK_CORNERS = [
    "4k3/8/8/8/1b6/8/3P4/4K3 w - - 0 1",  # the d2 pawn is pinned along the diagonal
    "4k3/4r3/8/8/8/8/4R3/4K3 w - - 0 1",  # the e2 rook is pinned and may move along the file
    "8/8/8/K2pP2r/8/8/8/7k w - d6 0 1",  # e5xd6 en passant would expose the king on the rank
    "8/8/8/8/k2Pp2Q/8/8/4K3 b - d3 0 1",  # and for black
    "4k3/8/8/8/8/8/8/R3K2r w Q - 0 1",  # in check from h1: evasions only, no castling
    "r3k2r/8/8/8/8/8/8/R3K2R w KQkq - 0 1",
    "1r2k3/2P5/8/8/8/8/8/4K3 w - - 0 1",  # c7xb8 with each promotion, c8 with each promotion
    "4k3/8/8/8/8/8/6p1/4K2R b K - 0 1",  # g2xh1 and g2g1, each to every piece
    "8/8/8/3k4/8/8/8/3QK3 b - - 0 1",  # the king may not step onto the queen's file
    "7K/8/k7/4R3/8/8/1b6/4K3 w - - 0 1",  # two white kings: pins count against python-chess's (h8)
]


def test_legal_moves_are_python_chess_legal_moves_in_the_same_order() -> None:
    positions = random_positions(games=60, seed=11) + [
        chess.Board(f) for f in CORNERS + PIN_AND_CHECK_CORNERS
    ]
    assert sum(b.is_check() for b in positions) > 50 and sum(bool(b.ep_square) for b in positions) > 10
    for board in positions:
        assert legal_moves(board) == list(board.legal_moves), board.fen()
    chess960 = chess.Board.from_chess960_pos(518 - 1)
    assert legal_moves(chess960) == list(chess960.legal_moves)


@pytest.mark.parametrize("fen", CORNERS + PIN_AND_CHECK_CORNERS)
def test_corner_positions_round_trip(fen: str) -> None:
    assert_round_trips(chess.Board(fen))


def test_castling_is_the_kings_two_square_move() -> None:
    board = chess.Board(CORNERS[0])
    for uci in ("e1g1", "e1c1"):
        move = chess.Move.from_uci(uci)
        assert board.is_castling(move)
        assert index_to_move(board, move_to_index(board, move)) == move
    black = chess.Board(CORNERS[1])
    # black's e8g8 mirrors white's e1g1: same index
    assert move_to_index(black, chess.Move.from_uci("e8g8")) == move_to_index(
        board, chess.Move.from_uci("e1g1")
    )
    # castling through the attacked f1 is not legal, queenside is
    through = chess.Board(CORNERS[2])
    assert not legal_mask(through)[move_to_index(through, chess.Move.from_uci("e1g1"))]
    assert legal_mask(through)[move_to_index(through, chess.Move.from_uci("e1c1"))]


def test_promotions_queen_by_queen_planes_under_promotions_by_their_own() -> None:
    board = chess.Board(CORNERS[6])
    q = move_to_index(board, chess.Move.from_uci("c7c8q"))
    n = move_to_index(board, chess.Move.from_uci("c7c8n"))
    assert q // 64 < 56 <= 64 <= n // 64
    assert index_to_move(board, q).uci() == "c7c8q"
    # a rook (not a pawn) on the seventh rank moving up is no promotion
    rook = chess.Board("k7/2R5/8/8/8/8/8/K7 w - - 0 1")
    assert index_to_move(rook, move_to_index(rook, chess.Move.from_uci("c7c8"))).uci() == "c7c8"
    # black promotes downwards, mirrored
    black = chess.Board(CORNERS[7])
    white = chess.Board("k7/5P2/8/8/8/8/8/7K w - - 0 1")
    assert move_to_index(black, chess.Move.from_uci("f2f1r")) == move_to_index(
        white, chess.Move.from_uci("f7f8r")
    )
    assert {index_to_move(black, i).uci() for i in legal_indices(black)[1].tolist()} >= {
        "f2e1q",
        "f2e1n",
        "f2e1b",
        "f2e1r",
        "f2g1q",
        "f2g1r",
        "f2f1b",
    }


def test_en_passant_round_trips_and_is_legal() -> None:
    board = chess.Board(CORNERS[4])
    move = chess.Move.from_uci("e5f6")
    assert board.is_en_passant(move)
    assert legal_mask(board)[move_to_index(board, move)]
    black = chess.Board(CORNERS[5])
    assert legal_mask(black)[move_to_index(black, chess.Move.from_uci("d4e3"))]


def test_indices_are_mirrored_for_black() -> None:
    board = chess.Board("r1bqkbnr/pppp1ppp/2n5/4p3/4P3/5N2/PPPP1PPP/RNBQKB1R w KQkq - 2 3")
    mirrored = board.mirror()
    moves, indices = legal_indices(board)
    mirrored_indices = [
        move_to_index(
            mirrored, chess.Move(chess.square_mirror(m.from_square), chess.square_mirror(m.to_square))
        )
        for m in moves
    ]
    assert indices.tolist() == mirrored_indices


def test_bad_moves_and_indices_are_refused() -> None:
    with pytest.raises(ValueError, match="no action for move 'a1h2'"):
        move_to_index(chess.Board(), chess.Move.from_uci("a1h2"))
    with pytest.raises(ValueError, match="not a promotion move"):
        move_to_index(chess.Board(), chess.Move.from_uci("e2e4n"))
    with pytest.raises(ValueError, match="out of range"):
        index_to_move(chess.Board(), NUM_ACTIONS)
    with pytest.raises(ValueError, match="leaves the board"):
        index_to_move(chess.Board(), 0 * 64 + 63)  # north from h8


# --- input planes ---------------------------------------------------------------------------------


def test_start_position_planes() -> None:
    planes = encode_board(chess.Board(), history=2)
    assert planes.shape == (input_channels(2), 8, 8) == (35, 8, 8)
    assert planes.dtype == np.float32
    expected_pawns = np.zeros((8, 8), dtype=np.float32)
    expected_pawns[1] = 1
    np.testing.assert_array_equal(planes[0], expected_pawns)  # our pawns
    np.testing.assert_array_equal(planes[6], expected_pawns[::-1])  # their pawns, on rank 7
    assert planes[5].sum() == 1 and planes[5, 0, 4] == 1  # our king on e1
    assert not planes[PLANES_PER_STEP:28].any()  # no history before the start
    c = PLANES_PER_STEP * 2
    assert planes[c].min() == 1  # white to move
    assert planes[c + 1].max() == pytest.approx(0.01)  # move 1
    assert planes[c + 2 : c + 6].min() == 1  # all castling rights
    assert planes[c + 6].max() == 0  # no-progress counter


def test_black_to_move_is_flipped_and_history_is_seen_from_black() -> None:
    board = chess.Board()
    board.push(chess.Move.from_uci("e2e4"))
    planes = encode_board(board, history=2)
    ours, theirs = planes[0], planes[6]
    assert ours[1].sum() == 8 and ours.sum() == 8  # black's pawns on black's second rank
    assert theirs[6, 4] == 0 and theirs[4, 4] == 1 and theirs.sum() == 8  # white's e-pawn on e4
    assert planes[11, 7, 4] == 1  # white's king on e1, the far rank for black
    assert planes[5, 0, 4] == 1  # black's king on e8, our first rank
    # one ply back: the start position, seen from black: white's e-pawn still on e2
    assert planes[PLANES_PER_STEP + 6, 6, 4] == 1
    c = PLANES_PER_STEP * 2
    assert planes[c].max() == 0  # black to move
    np.testing.assert_array_equal(encode_board(board.mirror(), 2)[:12], planes[:12])


def test_repetition_planes() -> None:
    board = chess.Board()
    shuffle = ["g1f3", "g8f6", "f3g1", "f6g8"]
    for uci in shuffle:
        board.push(chess.Move.from_uci(uci))
    planes = encode_board(board, history=5)
    assert planes[12].min() == 1 and planes[13].max() == 0  # now: seen once before
    assert planes[4 * PLANES_PER_STEP + 12].max() == 0  # 4 plies back: the first occurrence
    for uci in shuffle:
        board.push(chess.Move.from_uci(uci))
    planes = encode_board(board, history=5)
    assert planes[12].min() == 1 and planes[13].min() == 1  # seen twice before
    assert planes[4 * PLANES_PER_STEP + 12].min() == 1 and planes[4 * PLANES_PER_STEP + 13].max() == 0
    assert planes[PLANES_PER_STEP + 12].min() == 1  # 1 ply back: after ...Ng1, seen once before


def test_castling_and_counter_planes_from_the_side_to_move() -> None:
    board = chess.Board("r3k2r/8/8/8/8/8/8/R3K2R b Kq - 37 40")
    planes = encode_board(board, history=1)
    c = PLANES_PER_STEP
    assert [float(planes[c + i, 0, 0]) for i in range(7)] == pytest.approx(
        [0.0, 0.40, 0.0, 1.0, 1.0, 0.0, 0.37]
    )


def test_encode_boards_stacks() -> None:
    boards = random_positions(games=1, seed=3)[:5]
    stacked = encode_boards(boards, history=3)
    assert stacked.shape == (5, input_channels(3), 8, 8)
    np.testing.assert_array_equal(stacked[4], encode_board(boards[4], history=3))


def test_copy_board_is_board_copy() -> None:
    rng = random.Random(5)
    board = chess.Board()
    for _ in range(60):
        board.push(rng.choice(list(board.legal_moves)))
    copy = copy_board(board)
    assert copy == board and copy.move_stack == board.move_stack and copy.fen() == board.fen()
    copy.push(next(iter(copy.legal_moves)))
    assert len(board.move_stack) == 60  # the original is untouched
    reference = board.copy()
    for _ in range(60):
        assert copy_board(reference).fen() == reference.fen()
        reference.pop()
        copy.pop()
    copy.pop()
    assert copy == chess.Board() == reference


def test_the_legal_move_cache_tells_positions_apart_and_cannot_be_changed_by_callers() -> None:
    # the same pieces, once with a legal en passant capture and once without
    with_ep = chess.Board(CORNERS[4])
    without_ep = chess.Board(CORNERS[4].replace(" f6 ", " - "))
    assert len(legal_indices(with_ep)[0]) == len(legal_indices(without_ep)[0]) + 1
    moves, indices = legal_indices(with_ep)
    moves.clear()  # the list is the caller's copy
    with pytest.raises(ValueError, match="read-only"):
        indices[:] = -1  # the array is the cache's own, read-only
    again_moves, again_indices = legal_indices(with_ep)
    assert again_moves == list(with_ep.legal_moves)
    assert again_indices.tolist() == [move_to_index(with_ep, m) for m in again_moves]


def reference_planes(board: chess.Board, history: int) -> np.ndarray:
    """The planes by the book: pop the moves one by one and count repetitions with python-chess's
    own transposition keys (what :func:`encode_board` reads from the saved states instead)."""
    us = board.turn
    planes = np.zeros((input_channels(history), 8, 8), dtype=np.float32)
    b = board.copy()
    keys, limit, step = [], history - 1, 0
    while True:
        keys.append(b._transposition_key())
        if step < history:
            for j, (color, piece) in enumerate([(c, p) for c in (us, not us) for p in chess.PIECE_TYPES]):
                for square in b.pieces(piece, color):
                    row = chess.square_rank(square) if us == chess.WHITE else 7 - chess.square_rank(square)
                    planes[PLANES_PER_STEP * step + j, row, chess.square_file(square)] = 1.0
            limit = max(limit, step + b.halfmove_clock)
        if step >= limit or not b.move_stack:
            break
        b.pop()
        step += 1
    for i in range(min(history, len(keys))):
        seen = keys[i + 1 :].count(keys[i])
        planes[PLANES_PER_STEP * i + 12] = seen >= 1
        planes[PLANES_PER_STEP * i + 13] = seen >= 2
    c = PLANES_PER_STEP * history
    planes[c] = us == chess.WHITE
    planes[c + 1] = board.fullmove_number / 100.0
    planes[c + 2 : c + 6] = np.array(
        [
            board.has_kingside_castling_rights(us),
            board.has_queenside_castling_rights(us),
            board.has_kingside_castling_rights(not us),
            board.has_queenside_castling_rights(not us),
        ],
        dtype=np.float32,
    )[:, None, None]
    planes[c + 6] = board.halfmove_clock / 100.0
    return planes


def shuffling_games(games: int, seed: int) -> list[chess.Board]:
    """Positions with repetitions: random games in which both sides now and then move a knight
    out and back (four plies that return to the same position)."""
    rng = random.Random(seed)
    positions = []
    for _ in range(games):
        board = chess.Board()
        while not board.is_game_over() and board.ply() < 120:
            positions.append(board.copy())
            out: list[chess.Move] = []
            if rng.random() < 0.4:
                for _side in range(2):
                    hops = [
                        m
                        for m in board.legal_moves
                        if board.piece_type_at(m.from_square) == chess.KNIGHT and not board.is_capture(m)
                    ]
                    if not hops:
                        break
                    out.append(rng.choice(hops))
                    board.push(out[-1])
                    positions.append(board.copy())
                for move in out:
                    back = chess.Move(move.to_square, move.from_square)
                    if len(out) < 2 or back not in board.legal_moves:
                        break
                    board.push(back)
                    positions.append(board.copy())
                continue
            board.push(rng.choice(list(board.legal_moves)))
    return [p for p in positions if not p.is_game_over()]


@pytest.mark.parametrize("history", [1, 2, 8])
def test_encode_boards_matches_the_reference_over_games_with_repetitions(history: int) -> None:
    positions = shuffling_games(games=12, seed=history)
    # en passant squares, and a game from a FEN whose castling rights need cleaning
    odd = chess.Board("r3k2r/8/8/8/8/8/8/4K2R w KQkq - 0 1")  # white's a1 rook is missing
    for uci in ["h1h2", "e8d8", "h2h1", "d8e8", "e1d1", "a8a7", "d1e1", "a7a8"]:
        odd.push_uci(uci)
        positions.append(odd.copy())
    fischer = chess.Board("nrkbbqrn/pppppppp/8/8/8/8/PPPPPPPP/NRKBBQRN w GBgb - 0 1", chess960=True)
    for uci in ["h1g3", "h8g6", "g3h1", "g6h8", "h1g3"]:  # back at the start: a chess960 repetition
        fischer.push_uci(uci)
        positions.append(fischer.copy())
    ep = chess.Board("4k3/8/8/8/3p4/8/4P3/4K3 w - - 0 1")
    for uci in ["e2e4", "e8d8", "e1d1", "d8e8", "d1e1"]:
        ep.push_uci(uci)
        positions.append(ep.copy())
    assert sum(p.is_repetition(2) for p in positions) > 100
    batch = encode_boards(positions, history)
    for board, planes in zip(positions, batch, strict=True):
        np.testing.assert_array_equal(planes, reference_planes(board, history), err_msg=board.fen())
