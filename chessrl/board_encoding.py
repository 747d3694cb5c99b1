"""AlphaZero's board encoding: input planes for a position with its history, and the 8×8×73 move
space with legal-move masks.

Everything is seen from the side to move: for black the board is flipped top to bottom (rank 8
becomes our first rank), as AlphaZero does, so a move and its mirror image share one index.

Moves: an index is ``plane * 64 + from_square`` (squares in the side to move's frame, ``a1 = 0``),
the layout of a policy head that ends in a ``(73, 8, 8)`` convolution. Planes 0–55 are queen-like
moves (8 directions × distance 1–7, queen promotions and castling included: castling is the
king's two-square move, as python-chess writes it), 56–63 knight moves, 64–72 under-promotions
(left capture, push, right capture × knight, bishop, rook).

>>> board = chess.Board()
>>> move_to_index(board, chess.Move.from_uci("e2e4"))
76
>>> index_to_move(board, 76)
Move.from_uci('e2e4')
>>> board.push(chess.Move.from_uci("e2e4"))
>>> move_to_index(board, chess.Move.from_uci("e7e5"))   # black's e7e5 is white's e2e4, mirrored
76
>>> NUM_ACTIONS, int(legal_mask(board).sum())
(4672, 20)

Input planes: for each of ``history`` positions (the current one first, then one ply back, …;
zeros before the game's first position) 12 piece planes (ours P N B R Q K, then theirs) and 2
repetition planes (the position occurred once before / twice before); then 7 constant planes:
colour (1 when white is to move), the move number / 100, castling rights (ours kingside, ours
queenside, theirs kingside, theirs queenside) and the no-progress (fifty-move) counter / 100.

>>> planes = encode_board(board, history=2)
>>> planes.shape, planes.dtype, input_channels(8)
((35, 8, 8), dtype('float32'), 119)
>>> planes[0, 1].tolist()   # our (black's) pawns, on our second rank
[1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Hashable, Sequence

import chess
import numpy as np

__all__ = [
    "CONSTANT_PLANES",
    "LEGAL_CACHE_SIZE",
    "MOVE_COUNT_SCALE",
    "NO_PROGRESS_SCALE",
    "NUM_ACTIONS",
    "NUM_PLANES",
    "PLANES_PER_STEP",
    "copy_board",
    "encode_board",
    "encode_boards",
    "index_to_move",
    "input_channels",
    "legal_indices",
    "legal_mask",
    "move_to_index",
]

#: Move planes per square: 56 queen-like, 8 knight, 9 under-promotion.
NUM_PLANES = 73
#: Size of the policy: ``NUM_PLANES * 64``.
NUM_ACTIONS = NUM_PLANES * 64
#: Planes per history step: 12 piece planes and 2 repetition planes.
PLANES_PER_STEP = 14
#: Planes after the history: colour, move count, 4 castling rights, no-progress counter.
CONSTANT_PLANES = 7
#: The move-count plane holds ``fullmove_number / MOVE_COUNT_SCALE``.
MOVE_COUNT_SCALE = 100.0
#: The no-progress plane holds ``halfmove_clock / NO_PROGRESS_SCALE`` (1.0 at the fifty-move claim).
NO_PROGRESS_SCALE = 100.0
#: Positions whose legal moves :func:`legal_indices` remembers (most recently used first out last):
#: a search generates a leaf's moves, then its evaluator asks again for the mask.
LEGAL_CACHE_SIZE = 4096

# (rank step, file step) in the side to move's frame.
_QUEEN_DIRECTIONS = ((1, 0), (1, 1), (0, 1), (-1, 1), (-1, 0), (-1, -1), (0, -1), (1, -1))
_KNIGHT_STEPS = ((2, 1), (1, 2), (-1, 2), (-2, 1), (-2, -1), (-1, -2), (1, -2), (2, -1))
_UNDER_PROMOTIONS = (chess.KNIGHT, chess.BISHOP, chess.ROOK)
_FIRST_UNDER_PLANE = 64


def _build_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``plane_of[from, to]`` for queen-like and knight moves (-1 elsewhere), and per index its
    from square, to square (-1 when off the board) and under-promotion piece (0 for none)."""
    plane_of = np.full((64, 64), -1, dtype=np.int64)
    index_from = np.repeat(np.arange(64, dtype=np.int64)[None, :], NUM_PLANES, axis=0).reshape(-1)
    index_to = np.full(NUM_ACTIONS, -1, dtype=np.int64)
    index_promo = np.zeros(NUM_ACTIONS, dtype=np.int64)
    steps: list[tuple[int, int, int, int]] = []  # (plane, rank step, file step, promotion)
    for d, (dr, df) in enumerate(_QUEEN_DIRECTIONS):
        steps += [(d * 7 + dist - 1, dr * dist, df * dist, 0) for dist in range(1, 8)]
    steps += [(56 + k, dr, df, 0) for k, (dr, df) in enumerate(_KNIGHT_STEPS)]
    for fd in (-1, 0, 1):
        for p, piece in enumerate(_UNDER_PROMOTIONS):
            steps.append((_FIRST_UNDER_PLANE + (fd + 1) * 3 + p, 1, fd, piece))
    for plane, dr, df, promo in steps:
        for sq in range(64):
            rank, file = divmod(sq, 8)
            r, f = rank + dr, file + df
            if not (0 <= r < 8 and 0 <= f < 8) or (promo and rank != 6):
                continue
            to = r * 8 + f
            index_to[plane * 64 + sq] = to
            index_promo[plane * 64 + sq] = promo
            if not promo:
                plane_of[sq, to] = plane
    return plane_of, index_from, index_to, index_promo


_PLANE_OF, _INDEX_FROM, _INDEX_TO, _INDEX_PROMO = _build_tables()


def input_channels(history: int) -> int:
    """Planes of :func:`encode_board` for ``history`` positions.

    >>> input_channels(1), input_channels(2)
    (21, 35)
    """
    return PLANES_PER_STEP * history + CONSTANT_PLANES


def move_to_index(board: chess.Board, move: chess.Move) -> int:
    """The action index of ``move`` for the side to move in ``board`` (the move's geometry only:
    legality is not checked).

    >>> move_to_index(chess.Board(), chess.Move.from_uci("g1f3"))
    4038
    """
    flip = 56 if board.turn == chess.BLACK else 0
    src, dst = move.from_square ^ flip, move.to_square ^ flip
    if move.promotion in _UNDER_PROMOTIONS:
        df = (dst & 7) - (src & 7)
        if src >> 3 != 6 or dst >> 3 != 7 or abs(df) > 1:
            raise ValueError(f"not a promotion move: {move.uci()!r} in {board.fen()!r}")
        plane = _FIRST_UNDER_PLANE + (df + 1) * 3 + _UNDER_PROMOTIONS.index(move.promotion)
    else:
        plane = int(_PLANE_OF[src, dst])
        if plane < 0:
            raise ValueError(
                f"no action for move {move.uci()!r} in {board.fen()!r}: "
                "allowed are queen-like moves, knight moves and promotions"
            )
    return plane * 64 + src


def index_to_move(board: chess.Board, index: int) -> chess.Move:
    """The move of action ``index`` for the side to move in ``board``: a pawn reaching the last
    rank by a queen-like plane promotes to a queen. Legality is not checked.

    >>> board = chess.Board("8/4P3/8/8/8/8/8/k6K w - - 0 1")
    >>> index_to_move(board, move_to_index(board, chess.Move.from_uci("e7e8q"))).uci()
    'e7e8q'
    """
    if not 0 <= index < NUM_ACTIONS:
        raise ValueError(f"action index {index} out of range: allowed 0..{NUM_ACTIONS - 1}")
    dst = int(_INDEX_TO[index])
    if dst < 0:
        raise ValueError(f"action index {index} leaves the board")
    flip = 56 if board.turn == chess.BLACK else 0
    src = int(_INDEX_FROM[index])
    promotion: chess.PieceType | None = int(_INDEX_PROMO[index]) or None
    if promotion is None and dst >> 3 == 7 and board.piece_type_at(src ^ flip) == chess.PAWN:
        promotion = chess.QUEEN
    return chess.Move(src ^ flip, dst ^ flip, promotion=promotion)


def copy_board(board: chess.Board) -> chess.Board:
    """``board.copy()`` whose move stack shares the (never changed) move objects instead of
    copying them one by one: cheap however long the game.

    >>> board = chess.Board()
    >>> board.push(chess.Move.from_uci("e2e4"))
    >>> copy = copy_board(board)
    >>> copy.pop(), len(board.move_stack), copy == chess.Board()
    (Move.from_uci('e2e4'), 1, True)
    """
    copy = board.copy(stack=False)
    copy.move_stack = board.move_stack.copy()
    copy._stack = board._stack.copy()
    return copy


_LEGAL_CACHE: OrderedDict[Hashable, tuple[list[chess.Move], np.ndarray]] = OrderedDict()


def legal_indices(board: chess.Board) -> tuple[list[chess.Move], np.ndarray]:
    """The legal moves of ``board`` and their action indices (``int64``), in the same order
    (remembered for the last :data:`LEGAL_CACHE_SIZE` positions).

    >>> moves, indices = legal_indices(chess.Board())
    >>> len(moves), indices.dtype, len(set(indices.tolist()))
    (20, dtype('int64'), 20)
    """
    key = (board._transposition_key(), board.chess960)
    cached = _LEGAL_CACHE.get(key)
    if cached is not None:
        with contextlib.suppress(KeyError):  # another thread may have just dropped it
            _LEGAL_CACHE.move_to_end(key)
        return list(cached[0]), cached[1].copy()
    moves, indices = _legal_indices(board)
    _LEGAL_CACHE[key] = (moves, indices)
    if len(_LEGAL_CACHE) > LEGAL_CACHE_SIZE:
        _LEGAL_CACHE.popitem(last=False)
    return list(moves), indices.copy()


def _legal_indices(board: chess.Board) -> tuple[list[chess.Move], np.ndarray]:
    moves = list(board.legal_moves)
    n = len(moves)
    flip = 56 if board.turn == chess.BLACK else 0
    src = np.fromiter((m.from_square for m in moves), dtype=np.int64, count=n) ^ flip
    dst = np.fromiter((m.to_square for m in moves), dtype=np.int64, count=n) ^ flip
    promo = np.fromiter((m.promotion or 0 for m in moves), dtype=np.int64, count=n)
    planes = _PLANE_OF[src, dst]
    under = (promo >= chess.KNIGHT) & (promo <= chess.ROOK)
    if under.any():
        df = (dst[under] & 7) - (src[under] & 7)
        planes[under] = _FIRST_UNDER_PLANE + (df + 1) * 3 + (promo[under] - chess.KNIGHT)
    return moves, planes * 64 + src


def legal_mask(board: chess.Board) -> np.ndarray:
    """A boolean ``(NUM_ACTIONS,)`` mask, True at the indices of the legal moves.

    >>> int(legal_mask(chess.Board("7k/8/8/8/8/8/8/K7 w - - 0 1")).sum())
    3
    """
    mask = np.zeros(NUM_ACTIONS, dtype=bool)
    mask[legal_indices(board)[1]] = True
    return mask


_PIECE_TYPES = (chess.PAWN, chess.KNIGHT, chess.BISHOP, chess.ROOK, chess.QUEEN, chess.KING)


def _piece_bitboards(board: chess.Board, us: chess.Color) -> list[int]:
    bbs = [board.pieces_mask(pt, us) for pt in _PIECE_TYPES]
    return bbs + [board.pieces_mask(pt, not us) for pt in _PIECE_TYPES]


def encode_board(board: chess.Board, history: int = 8) -> np.ndarray:
    """The ``(input_channels(history), 8, 8)`` float32 planes of ``board`` (with its move stack as
    history), from the side to move's perspective; row 0 is our first rank, column 0 the a-file.

    >>> board = chess.Board()
    >>> for uci in ["g1f3", "g8f6", "f3g1", "f6g8"]:
    ...     board.push(chess.Move.from_uci(uci))
    >>> planes = encode_board(board, history=1)
    >>> float(planes[12].min()), float(planes[13].max())   # seen once before, not twice
    (1.0, 0.0)
    """
    if history < 1:
        raise ValueError(f"history must be at least 1, got {history}")
    us = board.turn
    planes = np.zeros((input_channels(history), 8, 8), dtype=np.float32)
    bitboards: list[int] = []
    keys: list[Hashable] = []  # transposition keys, the current position first, then back in time
    b = copy_board(board)
    limit = history - 1  # how far back positions are needed: history, and repetitions of it
    step = 0
    while True:
        keys.append(b._transposition_key())
        if step < history:
            bitboards += _piece_bitboards(b, us)
            limit = max(limit, step + b.halfmove_clock)
        if step >= limit or not b.move_stack:
            break
        b.pop()
        step += 1
    steps = min(history, len(keys))
    bits = np.unpackbits(np.array(bitboards, dtype="<u8").view(np.uint8), bitorder="little")
    pieces = bits.reshape(steps, 12, 8, 8).astype(np.float32)
    if us == chess.BLACK:
        pieces = pieces[:, :, ::-1, :]
    view = planes[: PLANES_PER_STEP * history].reshape(history, PLANES_PER_STEP, 8, 8)
    view[:steps, :12] = pieces
    for i in range(steps):
        seen = keys[i + 1 :].count(keys[i])
        view[i, 12] = seen >= 1
        view[i, 13] = seen >= 2
    c = PLANES_PER_STEP * history
    planes[c] = 1.0 if us == chess.WHITE else 0.0
    planes[c + 1] = board.fullmove_number / MOVE_COUNT_SCALE
    planes[c + 2] = board.has_kingside_castling_rights(us)
    planes[c + 3] = board.has_queenside_castling_rights(us)
    planes[c + 4] = board.has_kingside_castling_rights(not us)
    planes[c + 5] = board.has_queenside_castling_rights(not us)
    planes[c + 6] = board.halfmove_clock / NO_PROGRESS_SCALE
    return planes


def encode_boards(boards: Sequence[chess.Board], history: int = 8) -> np.ndarray:
    """:func:`encode_board` of each board, stacked: ``(len(boards), input_channels(history), 8, 8)``.

    >>> encode_boards([chess.Board()] * 3, history=2).shape
    (3, 35, 8, 8)
    """
    out = np.empty((len(boards), input_channels(history), 8, 8), dtype=np.float32)
    for i, board in enumerate(boards):
        out[i] = encode_board(board, history)
    return out
