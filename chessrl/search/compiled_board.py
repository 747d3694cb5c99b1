"""A chess position as two small arrays and the rules on them in compiled code (numba): legal moves
in python-chess's order, children, repetition keys and end-of-game values, python-chess's answers.

A position is a row of ``words`` (``(WORDS,)`` uint64: white's pawns, knights, bishops, rooks,
queens, king, then black's, in python-chess's square numbering, ``a1 = 0``; then the repetition
key) and a row of ``meta`` (``(META,)`` int64: the side to move, 0 white and 1 black; the castling
rights, bits ``1`` white kingside, ``2`` white queenside, ``4`` black kingside, ``8`` black
queenside; the en passant square python-chess keeps after a double push, 64 for none; the
half-move clock; the full-move number). Moves are the integer *codes* of
:mod:`chessrl.search.board_encoding`: ``kind * 4096 + from * 64 + to``, kind 0 an ordinary move
(castling is the king's two-square move), 1–4 a promotion to queen, rook, bishop, knight.

Each kernel takes rows and writes into arrays the caller owns, so a search can keep every node's
position in two arrays and make a round's children and list a round's moves in one call. The
counters are 64-bit (no clock limit as in ``rust_chess``); the key is a 64-bit zobrist hash of
python-chess's ``_transposition_key`` class (pieces, side to move, cleaned castling rights, the en
passant square only when a capture there is legal).

>>> words, meta = from_board(chess.Board())
>>> out = np.empty(MAX_MOVES, dtype=np.int64)
>>> n = legal_codes(words, meta, out)
>>> n, out[:3].tolist() == [code_of_uci(u) for u in ("g1h3", "g1f3", "b1c3")]
(20, True)
>>> w2, m2 = np.empty_like(words), np.empty_like(meta)
>>> make_move(words, meta, code_of_uci("e2e4"), w2, m2)
>>> to_board(w2, m2).fen() == chess.Board("rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1").fen()
True
>>> terminal_value(w2, m2, legal_count(w2, m2), 0)      # the game goes on: NaN
nan
"""

from __future__ import annotations

import math

import chess
import numpy as np

from chessrl.search.compiled import jit
from chessrl.search.compiled_bitboards import (
    FULL,
    KING_ATTACKS,
    KNIGHT_ATTACKS,
    ONE,
    PAWN_ATTACKS,
    ZERO,
    attacked,
    lsb,
    occupied,
    popcount,
    slide,
    square_bb,
)

__all__ = [
    "MAX_MOVES",
    "META",
    "WORDS",
    "code_of_uci",
    "from_board",
    "has_legal_move",
    "in_check",
    "legal_codes",
    "legal_count",
    "make_move",
    "order_key",
    "repetition_key",
    "terminal_value",
    "to_board",
]

WORDS = 13  # 12 piece bitboards, the key
META = 5  # turn, castling, en passant square, half-move clock, full-move number
KEY = 12
TURN, CASTLING, EP, CLOCK, FULLMOVE = 0, 1, 2, 3, 4
NO_EP = 64
#: Room for every legal move of any position (the most known is 218).
MAX_MOVES = 256

# Promotion kinds 1..4 -> piece type index (P N B R Q K = 0..5): queen, rook, bishop, knight.
_PROMO_TYPE = np.array([0, 4, 3, 2, 1], dtype=np.int64)


def _zobrist() -> np.ndarray:
    """The key's random numbers: per piece and square, the side to move, the castling rights, the
    en passant file."""
    rng = np.random.default_rng(0x5EED_C4E55)
    zobrist = rng.integers(0, 2**63, size=12 * 64 + 1 + 16 + 8, dtype=np.int64).astype(np.uint64)
    zobrist ^= rng.integers(0, 2**63, size=zobrist.shape, dtype=np.int64).astype(np.uint64) << np.uint64(1)
    return zobrist


_ZOBRIST = _zobrist()
_Z_TURN = 12 * 64
_Z_CASTLE = _Z_TURN + 1
_Z_EP = _Z_CASTLE + 16
_DARK = np.uint64(chess.BB_DARK_SQUARES)
_LIGHT = np.uint64(chess.BB_LIGHT_SQUARES)


@jit
def _legal_after(
    words: np.ndarray, us: int, ksq: int, frm: int, to: int, occ: np.uint64, captured: np.uint64
) -> bool:
    """Whether the move ``frm -> to`` (removing the enemy piece on ``captured``, a bitboard, when
    not empty) leaves our king (on ``ksq`` before the move) unattacked."""
    king = to if frm == ksq else ksq
    after = (occ & ~square_bb(frm) & ~captured) | square_bb(to)
    return not attacked(words, king, 1 - us, after, ~(captured | square_bb(to)))


@jit
def _add(out: np.ndarray, n: int, frm: int, to: int, promote: bool) -> int:
    if promote:
        for kind in range(1, 5):
            out[n] = kind * 4096 + frm * 64 + to
            n += 1
        return n
    out[n] = frm * 64 + to
    return n + 1


@jit
def _pawn_moves(
    words: np.ndarray, us: int, ksq: int, occ: np.uint64, opp: np.uint64, ep: int, out: np.ndarray, n: int
) -> int:
    """Append the legal pawn moves (pushes, captures, promotions, en passant) to ``out[n:]``;
    returns the new count."""
    pawns = words[us * 6]
    up = 8 if us == 0 else -8
    last_rank = 7 if us == 0 else 0
    start_rank = 1 if us == 0 else 6
    while pawns:
        frm = lsb(pawns)
        pawns &= pawns - ONE
        to = frm + up
        promote = (to >> 3) == last_rank
        if not occ & square_bb(to):
            if _legal_after(words, us, ksq, frm, to, occ, ZERO):
                n = _add(out, n, frm, to, promote)
            two = to + up
            if (
                (frm >> 3) == start_rank
                and not occ & square_bb(two)
                and _legal_after(words, us, ksq, frm, two, occ, ZERO)
            ):
                n = _add(out, n, frm, two, False)
        caps = PAWN_ATTACKS[us, frm] & opp
        while caps:
            to = lsb(caps)
            caps &= caps - ONE
            if _legal_after(words, us, ksq, frm, to, occ, square_bb(to)):
                n = _add(out, n, frm, to, promote)
        en_passant = (
            ep != NO_EP and (PAWN_ATTACKS[us, frm] & square_bb(ep)) != ZERO and not occ & square_bb(ep)
        )
        if en_passant and _legal_after(words, us, ksq, frm, ep, occ, square_bb(ep - up)):
            n = _add(out, n, frm, ep, False)
    return n


@jit
def _castling(
    words: np.ndarray, rights: int, us: int, ksq: int, occ: np.uint64, out: np.ndarray, n: int
) -> int:
    """Append the legal castling moves (standard chess: the king on e1/e8, the rooks on their
    corners, as the cleaned ``rights`` say) to ``out[n:]``; returns the new count."""
    mine = rights >> (2 * us)
    them = 1 - us
    if not mine & 3 or attacked(words, ksq, them, occ, FULL):
        return n
    base = 56 * us
    short = (mine & 1) != 0 and not occ & (square_bb(base + 5) | square_bb(base + 6))
    if (
        short
        and not attacked(words, base + 5, them, occ, FULL)
        and not attacked(words, base + 6, them, occ, FULL)
    ):
        out[n] = ksq * 64 + base + 6
        n += 1
    long = (mine & 2) != 0 and not occ & (square_bb(base + 1) | square_bb(base + 2) | square_bb(base + 3))
    if (
        long
        and not attacked(words, base + 3, them, occ, FULL)
        and not attacked(words, base + 2, them, occ, FULL)
    ):
        out[n] = ksq * 64 + base + 2
        n += 1
    return n


@jit
def _generate(words: np.ndarray, meta: np.ndarray, out: np.ndarray, stop_at_one: bool) -> int:
    """Write the legal codes into ``out`` (unordered); returns their number (at least 1 and
    possibly fewer than all with ``stop_at_one``, when there is one)."""
    us = meta[TURN]
    own = occupied(words, us)
    opp = occupied(words, 1 - us)
    occ = own | opp
    o = us * 6
    ksq = lsb(words[o + 5])
    n = _pawn_moves(words, us, ksq, occ, opp, meta[EP], out, 0)
    if stop_at_one and n:
        return n
    for t in range(1, 6):  # knights, bishops, rooks, queens, king
        pieces = words[o + t]
        while pieces:
            frm = lsb(pieces)
            pieces &= pieces - ONE
            if t == 1:
                targets = KNIGHT_ATTACKS[frm]
            elif t == 2:
                targets = slide(frm, occ, 4, 8)
            elif t == 3:
                targets = slide(frm, occ, 0, 4)
            elif t == 4:
                targets = slide(frm, occ, 0, 8)
            else:
                targets = KING_ATTACKS[frm]
            targets &= ~own
            while targets:
                to = lsb(targets)
                targets &= targets - ONE
                if _legal_after(words, us, ksq, frm, to, occ, square_bb(to) & opp):
                    out[n] = frm * 64 + to
                    n += 1
            if stop_at_one and n:
                return n
    return _castling(words, meta[CASTLING], us, ksq, occ, out, n)


@jit
def order_key(code: int, pawns: np.uint64, king: int, in_check: bool, ep: int) -> int:
    """A move's rank in python-chess's order of ``legal_moves`` (smaller first): in check, the
    king's moves first; then the other pieces' (the king's too when not in check) from the highest
    square down, each one's targets likewise; castling; pawn captures (from and target high to low,
    promotions queen, rook, bishop, knight); single pushes, double pushes; en passant. ``pawns``:
    the side to move's pawns; ``ep``: the en passant square (any other value: none)."""
    f = (code >> 6) & 63
    t = code & 63
    if (pawns >> np.uint64(f)) & ONE:
        if (t & 7) != (f & 7):
            cat = 6 if t == ep else 3
        elif abs(t - f) == 16:
            cat = 5
        else:
            cat = 4
    elif f == king:
        cat = 0 if in_check else (2 if abs(t - f) == 2 else 1)
    else:
        cat = 1
    return (cat << 20) | ((63 - f) << 14) | ((63 - t) << 8) | (code >> 12)


@jit
def _order(words: np.ndarray, meta: np.ndarray, out: np.ndarray, n: int) -> None:
    """Sort ``out[:n]`` by :func:`order_key`, in place (an insertion sort: a few dozen moves)."""
    us = meta[TURN]
    o = us * 6
    pawns = words[o]
    king = lsb(words[o + 5])
    check = attacked(words, king, 1 - us, occupied(words, 0) | occupied(words, 1), FULL)
    ep = meta[EP]
    keys = np.empty(n, dtype=np.int64)
    for i in range(n):
        keys[i] = order_key(out[i], pawns, king, check, ep)
    for i in range(1, n):
        k, c = keys[i], out[i]
        j = i - 1
        while j >= 0 and keys[j] > k:
            keys[j + 1] = keys[j]
            out[j + 1] = out[j]
            j -= 1
        keys[j + 1] = k
        out[j + 1] = c


@jit
def legal_codes(words: np.ndarray, meta: np.ndarray, out: np.ndarray) -> int:
    """Write the legal moves' codes into ``out`` (room for :data:`MAX_MOVES`) in python-chess's
    order of ``legal_moves``; returns how many."""
    n = _generate(words, meta, out, False)
    _order(words, meta, out, n)
    return n


@jit
def legal_count(words: np.ndarray, meta: np.ndarray) -> int:
    """The number of legal moves."""
    out = np.empty(MAX_MOVES, dtype=np.int64)
    return _generate(words, meta, out, False)


@jit
def _has_legal(words: np.ndarray, meta: np.ndarray, scratch: np.ndarray) -> bool:
    return _generate(words, meta, scratch, True) > 0


@jit
def has_legal_move(words: np.ndarray, meta: np.ndarray) -> bool:
    """Whether the side to move has a legal move (the generator stops at the first)."""
    scratch = np.empty(MAX_MOVES, dtype=np.int64)
    return _generate(words, meta, scratch, True) > 0


@jit
def in_check(words: np.ndarray, meta: np.ndarray) -> bool:
    """Whether the side to move is in check."""
    us = meta[TURN]
    return attacked(words, lsb(words[us * 6 + 5]), 1 - us, occupied(words, 0) | occupied(words, 1), FULL)


@jit
def _legal_en_passant(words: np.ndarray, meta: np.ndarray) -> bool:
    """Whether a pawn of the side to move can capture en passant now."""
    ep = meta[EP]
    if ep == NO_EP:
        return False
    us = meta[TURN]
    o = us * 6
    occ = occupied(words, 0) | occupied(words, 1)
    if occ & square_bb(ep):
        return False
    up = 8 if us == 0 else -8
    ksq = lsb(words[o + 5])
    attackers = PAWN_ATTACKS[1 - us, ep] & words[o]
    while attackers:
        frm = lsb(attackers)
        attackers &= attackers - ONE
        if _legal_after(words, us, ksq, frm, ep, occ, square_bb(ep - up)):
            return True
    return False


@jit
def repetition_key(words: np.ndarray, meta: np.ndarray) -> np.uint64:
    """The 64-bit zobrist key of the position's python-chess ``_transposition_key`` class."""
    key = ZERO
    for p in range(12):
        b = words[p]
        while b:
            sq = lsb(b)
            b &= b - ONE
            key ^= _ZOBRIST[p * 64 + sq]
    if meta[TURN] == 1:
        key ^= _ZOBRIST[_Z_TURN]
    key ^= _ZOBRIST[_Z_CASTLE + meta[CASTLING]]
    if _legal_en_passant(words, meta):
        key ^= _ZOBRIST[_Z_EP + (meta[EP] & 7)]
    return key


@jit
def make_move(
    words: np.ndarray, meta: np.ndarray, code: int, out_words: np.ndarray, out_meta: np.ndarray
) -> None:
    """Write the position after the legal move ``code`` into ``out_words``, ``out_meta`` (its key
    too). Legality is not checked: pass a legal move only."""
    frm = (code >> 6) & 63
    to = code & 63
    kind = code >> 12
    us = meta[TURN]
    them = 1 - us
    o, t = us * 6, them * 6
    for p in range(12):
        out_words[p] = words[p]
    fb, tb = square_bb(frm), square_bb(to)
    moving = o
    for p in range(o, o + 6):
        if words[p] & fb:
            moving = p
            break
    capture = False
    for p in range(t, t + 6):
        if words[p] & tb:
            out_words[p] &= ~tb
            capture = True
    pawn = moving == o
    if pawn and to == meta[EP] and (to & 7) != (frm & 7) and not capture:
        out_words[t] &= ~square_bb(to - 8 if us == 0 else to + 8)
        capture = True
    out_words[moving] &= ~fb
    if kind:
        out_words[o + _PROMO_TYPE[kind]] |= tb
    else:
        out_words[moving] |= tb
    rights = meta[CASTLING]
    if moving == o + 5:
        if abs(to - frm) == 2:  # castling: the rook too
            rook_from, rook_to = (frm + 3, frm + 1) if to > frm else (frm - 4, frm - 1)
            out_words[o + 3] = (out_words[o + 3] & ~square_bb(rook_from)) | square_bb(rook_to)
        rights &= ~(3 << (2 * us))
    for sq in (frm, to):
        if sq == 7:
            rights &= ~1
        elif sq == 0:
            rights &= ~2
        elif sq == 63:
            rights &= ~4
        elif sq == 56:
            rights &= ~8
    out_meta[TURN] = them
    out_meta[CASTLING] = rights
    out_meta[EP] = (frm + to) // 2 if pawn and abs(to - frm) == 16 else NO_EP
    out_meta[CLOCK] = 0 if pawn or capture else meta[CLOCK] + 1
    out_meta[FULLMOVE] = meta[FULLMOVE] + (1 if us == 1 else 0)
    out_words[KEY] = repetition_key(out_words, out_meta)


@jit
def _insufficient_material(words: np.ndarray) -> bool:
    """python-chess's ``is_insufficient_material``: neither side can mate."""
    for c in range(2):
        o = c * 6
        if words[o] or words[o + 3] or words[o + 4]:
            return False
    knights = words[1] | words[7]
    bishops = words[2] | words[8]
    kings = words[5] | words[11]
    for c in range(2):
        ours = occupied(words, c)
        theirs = occupied(words, 1 - c)
        if ours & knights:
            if popcount(ours) > 2 or theirs & ~kings:
                return False
        elif ours & bishops:
            same_colour = not bishops & _DARK or not bishops & _LIGHT
            if not same_colour or knights:
                return False
    return True


@jit
def _fifty_by_move(words: np.ndarray, meta: np.ndarray) -> bool:
    """At clock 99: a legal move that is no capture or pawn move reaches clock 100 and a position
    with a legal move (python-chess's ``can_claim_fifty_moves``)."""
    moves = np.empty(MAX_MOVES, dtype=np.int64)
    n = _generate(words, meta, moves, False)
    w2 = np.empty(WORDS, dtype=np.uint64)
    m2 = np.empty(META, dtype=np.int64)
    scratch = np.empty(MAX_MOVES, dtype=np.int64)
    for i in range(n):
        make_move(words, meta, moves[i], w2, m2)
        if m2[CLOCK] >= 100 and _has_legal(w2, m2, scratch):
            return True
    return False


@jit
def terminal_value(words: np.ndarray, meta: np.ndarray, n_legal: int, repetitions: int) -> float:
    """:func:`chessrl.search.search_board.terminal_value`: -1 checkmated, 0 drawn (stalemate, a
    threefold repetition — ``repetitions`` earlier occurrences, two or more —, a fifty-move
    claim, insufficient material), NaN while the game goes on. ``n_legal``: the legal moves' count."""
    if n_legal == 0:
        return -1.0 if in_check(words, meta) else 0.0
    if repetitions >= 2:
        return 0.0
    clock = meta[CLOCK]
    if clock >= 100:
        return 0.0
    if clock == 99 and _fifty_by_move(words, meta):
        return 0.0
    if _insufficient_material(words):
        return 0.0
    return math.nan


# --- python-chess <-> arrays ---------------------------------------------------------------------

_CASTLE_SQUARES = ((chess.H1, 1), (chess.A1, 2), (chess.H8, 4), (chess.A8, 8))


def from_board(board: chess.Board) -> tuple[np.ndarray, np.ndarray]:
    """``board``'s current position as ``(words, meta)`` (its key too). A standard board only
    (:func:`chessrl.search.native_board.supported`)."""
    words = np.zeros(WORDS, dtype=np.uint64)
    for c, colour in enumerate((chess.WHITE, chess.BLACK)):
        mine = board.occupied_co[colour]
        for t, bb in enumerate(
            (board.pawns, board.knights, board.bishops, board.rooks, board.queens, board.kings)
        ):
            words[c * 6 + t] = np.uint64(bb & mine)
    clean = board.clean_castling_rights()
    rights = sum(bit for sq, bit in _CASTLE_SQUARES if clean & chess.BB_SQUARES[sq])
    ep = NO_EP if board.ep_square is None else board.ep_square
    meta = np.array(
        [0 if board.turn else 1, rights, ep, board.halfmove_clock, board.fullmove_number], dtype=np.int64
    )
    words[KEY] = repetition_key(words, meta)
    return words, meta


def to_board(words: np.ndarray, meta: np.ndarray) -> chess.Board:
    """The python-chess board of a position (no move stack)."""
    board = chess.Board(None)
    for p in range(12):
        for sq in chess.SquareSet(int(words[p])):
            board.set_piece_at(sq, chess.Piece(p % 6 + 1, p < 6))
    board.turn = bool(meta[TURN] == 0)
    board.castling_rights = sum(
        chess.BB_SQUARES[sq] for sq, bit in _CASTLE_SQUARES if int(meta[CASTLING]) & bit
    )
    board.ep_square = None if meta[EP] == NO_EP else int(meta[EP])
    board.halfmove_clock = int(meta[CLOCK])
    board.fullmove_number = int(meta[FULLMOVE])
    return board


_PROMOTION_LETTERS = ("", "q", "r", "b", "n")


def code_of_uci(uci: str) -> int:
    """The code of a UCI move (standard chess: castling as the king's two-square move).

    >>> code_of_uci("e7e8n")
    19772
    """
    move = chess.Move.from_uci(uci)
    kind = _PROMOTION_LETTERS.index(uci[4:]) if len(uci) > 4 else 0
    return kind * 4096 + move.from_square * 64 + move.to_square
