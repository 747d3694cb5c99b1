"""The bitboard steps of :mod:`chessrl.search.compiled_board`'s rules, compiled with numba: the
attack tables, a square's bit, the lowest set square, a slider's reach, whether a square is
attacked. Squares are python-chess's (``a1 = 0``); ``words`` is a position's row of
:mod:`~chessrl.search.compiled_board` (white's pawns, knights, bishops, rooks, queens, king, then
black's), colour 0 white and 1 black.

>>> import chess
>>> lsb(np.uint64(0b101000)), popcount(np.uint64(0b101000))
(3, 2)
>>> sorted(chess.SquareSet(int(KNIGHT_ATTACKS[chess.G1]))) == [chess.E2, chess.F3, chess.H3]
True
>>> words = np.zeros(13, dtype=np.uint64)
>>> words[3] = square_bb(chess.A1)   # a white rook on a1, nothing else
>>> attacked(words, chess.A8, 0, words[3], FULL), attacked(words, chess.B8, 0, words[3], FULL)
(True, False)
"""

from __future__ import annotations

import numpy as np

from chessrl.search.compiled import jit

__all__ = [
    "FULL",
    "KING_ATTACKS",
    "KNIGHT_ATTACKS",
    "ONE",
    "PAWN_ATTACKS",
    "ZERO",
    "attacked",
    "lsb",
    "occupied",
    "popcount",
    "slide",
    "square_bb",
]

ONE = np.uint64(1)
ZERO = np.uint64(0)
FULL = np.uint64(0xFFFFFFFFFFFFFFFF)

# Directions: N, S, E, W (rook), NE, NW, SE, SW (bishop); _STEP[d, sq] the next square or -1.
_DIRS = ((0, 1), (0, -1), (1, 0), (-1, 0), (1, 1), (-1, 1), (1, -1), (-1, -1))


def _tables() -> tuple[np.ndarray, ...]:
    """``_STEP``, and the knight's, the king's and each colour's pawns' attacks from each square."""
    step = np.full((8, 64), -1, dtype=np.int64)
    knight = np.zeros(64, dtype=np.uint64)
    king = np.zeros(64, dtype=np.uint64)
    pawn = np.zeros((2, 64), dtype=np.uint64)
    for sq in range(64):
        f, r = sq & 7, sq >> 3
        for d, (df, dr) in enumerate(_DIRS):
            if 0 <= f + df < 8 and 0 <= r + dr < 8:
                step[d, sq] = (r + dr) * 8 + f + df
                king[sq] |= np.uint64(1) << np.uint64((r + dr) * 8 + f + df)
        for df, dr in ((1, 2), (2, 1), (2, -1), (1, -2), (-1, -2), (-2, -1), (-2, 1), (-1, 2)):
            if 0 <= f + df < 8 and 0 <= r + dr < 8:
                knight[sq] |= np.uint64(1) << np.uint64((r + dr) * 8 + f + df)
        for colour, dr in ((0, 1), (1, -1)):
            for df in (-1, 1):
                if 0 <= f + df < 8 and 0 <= r + dr < 8:
                    pawn[colour, sq] |= np.uint64(1) << np.uint64((r + dr) * 8 + f + df)
    return step, knight, king, pawn


_STEP, KNIGHT_ATTACKS, KING_ATTACKS, PAWN_ATTACKS = _tables()


@jit
def square_bb(sq: int) -> np.uint64:
    """The bitboard of square ``sq`` alone."""
    return ONE << np.uint64(sq)


@jit
def lsb(b: np.uint64) -> int:
    """The lowest set square of a non-empty bitboard."""
    n = 0
    if not b & np.uint64(0xFFFFFFFF):
        b >>= np.uint64(32)
        n += 32
    if not b & np.uint64(0xFFFF):
        b >>= np.uint64(16)
        n += 16
    if not b & np.uint64(0xFF):
        b >>= np.uint64(8)
        n += 8
    if not b & np.uint64(0xF):
        b >>= np.uint64(4)
        n += 4
    if not b & np.uint64(0x3):
        b >>= np.uint64(2)
        n += 2
    if not b & ONE:
        n += 1
    return n


@jit
def popcount(b: np.uint64) -> int:
    """The number of set squares."""
    n = 0
    while b:
        b &= b - ONE
        n += 1
    return n


@jit
def slide(sq: int, occ: np.uint64, d0: int, d1: int) -> np.uint64:
    """The squares a slider on ``sq`` reaches in directions ``d0 .. d1 - 1`` (blockers included)."""
    att = ZERO
    for d in range(d0, d1):
        s = _STEP[d, sq]
        while s >= 0:
            b = ONE << np.uint64(s)
            att |= b
            if occ & b:
                break
            s = _STEP[d, s]
    return att


@jit
def attacked(words: np.ndarray, sq: int, by: int, occ: np.uint64, keep: np.uint64) -> bool:
    """Whether colour ``by``'s pieces (those on ``keep``) attack ``sq`` with ``occ`` occupied."""
    o = by * 6
    if KNIGHT_ATTACKS[sq] & words[o + 1] & keep:
        return True
    if KING_ATTACKS[sq] & words[o + 5] & keep:
        return True
    # a pawn of `by` attacks sq where ours on sq would attack it
    if PAWN_ATTACKS[1 - by, sq] & words[o] & keep:
        return True
    queens = words[o + 4]
    diagonal = (words[o + 2] | queens) & keep
    if diagonal and slide(sq, occ, 4, 8) & diagonal:
        return True
    straight = (words[o + 3] | queens) & keep
    return bool(straight) and bool(slide(sq, occ, 0, 4) & straight)


@jit
def occupied(words: np.ndarray, colour: int) -> np.uint64:
    """The squares of ``colour``'s pieces."""
    o = colour * 6
    return words[o] | words[o + 1] | words[o + 2] | words[o + 3] | words[o + 4] | words[o + 5]
