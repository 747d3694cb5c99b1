"""The search's board work on ``rust_chess`` boards, exactly as python-chess (the reference) does it.

A search node's position is a ``rust_chess.Board`` made by :func:`from_board` (the root) or
:func:`child` (every other node). Moves are integer *codes*, as in
:mod:`chessrl.search.board_encoding`: ``kind * 4096 + from_square * 64 + to_square`` with kind 0 for an
ordinary move (castling is the king's two-square move) and 1–4 for a promotion to queen, rook,
bishop, knight; squares are python-chess's (``a1 = 0``). Every answer equals python-chess's on a
board for which :func:`supported` holds; for any other board the caller uses python-chess.

>>> board = chess.Board()
>>> supported(board)
True
>>> rb = from_board(board)
>>> codes = legal_codes(rb)
>>> len(codes), turn(rb)
(20, True)
>>> e4 = 12 * 64 + 28                          # e2e4: from e2 (12) to e4 (28)
>>> after = child(rb, e4)
>>> turn(after), halfmove_clock(after), constant_fields(after)
(False, 0, (False, 1, True, True, True, True, 0))
>>> hex(piece_words(after)[6])                 # theirs (white's) pawns, python-chess squares
'0x1000ef00'
>>> terminal_value(after, repetitions=0) is None
True

Repetitions: python-chess's ``is_repetition`` counts the earlier positions equal to this one (by
``_transposition_key``) since the last capture or pawn move. :func:`repetition_key` gives one
int per such class; :func:`history_keys` gives the keys of a game's positions up to its current
one, and :func:`repetitions` counts the earlier occurrences along a path of keys, which
:func:`terminal_value` takes (two or more: a threefold repetition, a draw).

>>> board = chess.Board()
>>> for uci in ["g1f3", "g8f6", "f3g1", "f6g8", "g1f3", "g8f6", "f3g1", "f6g8"]:
...     board.push(chess.Move.from_uci(uci))
>>> keys = history_keys(board)
>>> len(keys), repetitions(keys, board.halfmove_clock)
(9, 2)
>>> terminal_value(from_board(board), repetitions(keys, board.halfmove_clock))
0.0
>>> board.is_repetition(3)
True

Traps of rust_chess 0.4.3 this module avoids (the unit tests pin each):

* A board in ``RepetitionDetectionMode.FULL`` (the default) whose half-move clock exceeds the
  history it has seen panics in Rust when moved or asked for its repetitions: the interpreter
  aborts. Boards here are built with ``RepetitionDetectionMode.NONE``; repetitions are counted
  with :func:`repetition_key`. (In FULL mode ``make_move_new`` also raises on a fivefold
  repetition.)
* ``generate_legal_moves()`` resumes where the last call on the same board stopped (an
  exhausted board yields nothing): :func:`legal_codes` calls ``reset_move_generator()`` first.
  So a board is not to be shared between threads.
* The half-move clock and the full-move number are 8-bit: a FEN above 255 is refused and a move
  from 255 wraps to 0. :func:`supported` leaves room for :data:`MAX_PLIES` plies below the root.
* The zobrist hash counts an en passant square whenever an enemy pawn stands beside the pawn that
  just made a double push, even when the capture is illegal (pinned pawn, a check it does not
  answer); python-chess's key counts it only when an en passant capture is legal.
  :func:`repetition_key` drops it in that case.
* ``get_fen()`` writes the double-pushed pawn's square as the en passant square (``d5``, not
  ``d6``); the ``en_passant`` property is right.
* Its insufficient material differs from python-chess's (two bishops on squares of one colour
  are enough to mate for rust_chess): :func:`terminal_value` uses python-chess's rule.
"""

from __future__ import annotations

from collections.abc import Sequence

import chess
import numpy as np
import rust_chess

from chessrl.search.compiled import jit
from chessrl.search.compiled_board import order_key

__all__ = [
    "MAX_PLIES",
    "child",
    "code_of_move",
    "constant_fields",
    "from_board",
    "halfmove_clock",
    "history_keys",
    "legal_codes",
    "piece_words",
    "repetition_key",
    "repetitions",
    "supported",
    "terminal_value",
    "turn",
]

#: Plies below a root that :func:`supported` guarantees exact: rust_chess keeps the half-move
#: clock and the full-move number in 8 bits (at most 255), so a root must leave that much room.
MAX_PLIES = 100
_MAX_COUNTER = 255

_NONE_MODE = rust_chess.RepetitionDetectionMode.NONE
_WHITE = rust_chess.WHITE
_BLACK = rust_chess.BLACK
_TO_UINT = rust_chess.Bitboard.to_uint
_GET_UCI = rust_chess.Move.get_uci
_RC_PIECE_TYPES = (
    rust_chess.PAWN,
    rust_chess.KNIGHT,
    rust_chess.BISHOP,
    rust_chess.ROOK,
    rust_chess.QUEEN,
    rust_chess.KING,
)
#: White's P N B R Q K, then black's.
_RC_PIECES = tuple(rust_chess.Piece(t, c) for c in (True, False) for t in _RC_PIECE_TYPES)
_RC_PAWN = {True: _RC_PIECES[0], False: _RC_PIECES[6]}
# CastleRights members are singletons but not hashable: keyed by id.
_RIGHTS = {
    id(rust_chess.CastleRights.NO_RIGHTS): (False, False),
    id(rust_chess.CastleRights.KING_SIDE): (True, False),
    id(rust_chess.CastleRights.QUEEN_SIDE): (False, True),
    id(rust_chess.CastleRights.BOTH): (True, True),
}

# Codes: kind 0 ordinary, 1..4 promotion to queen, rook, bishop, knight (board_encoding's scheme).
_PROMOTION_LETTERS = ("", "q", "r", "b", "n")
_PROMOTION_KIND = {None: 0, chess.QUEEN: 1, chess.ROOK: 2, chess.BISHOP: 3, chess.KNIGHT: 4}
_NUM_CODES = 5 * 4096
#: UCI text of every code.
_UCI_OF_CODE = [
    chess.SQUARE_NAMES[c % 4096 // 64] + chess.SQUARE_NAMES[c % 64] + _PROMOTION_LETTERS[c // 4096]
    for c in range(_NUM_CODES)
]
_CODE_OF_UCI = {uci: c for c, uci in enumerate(_UCI_OF_CODE)}
_CODE_GET = _CODE_OF_UCI.__getitem__
#: rust_chess Move per code, made on first use (Move objects are never changed).
_RC_MOVES: list[rust_chess.Move | None] = [None] * _NUM_CODES


def supported(board: chess.Board) -> bool:
    """True when every function here gives python-chess's answers for ``board`` and the positions
    up to :data:`MAX_PLIES` plies below it: a standard ``chess.Board`` (not a subclass, not
    Chess960) that python-chess calls valid (one king per side, no pawn on a back rank, sound
    castling rights and en passant square, the side not to move not in check, no impossible
    check) with clocks rust_chess can hold, and no null move among the moves since the last
    capture or pawn move (:func:`history_keys` replays those: a null move is no move for
    rust_chess, and one from an empty square aborts the interpreter).

    >>> supported(chess.Board()), supported(chess.Board(chess960=True))
    (True, False)
    >>> supported(chess.Board("4k3/8/8/8/8/8/8/4K3 w - - 200 1"))   # the clock would overflow
    False
    >>> board = chess.Board()
    >>> board.push(chess.Move.null())
    >>> supported(board)
    False
    """
    if not (
        type(board) is chess.Board
        and not board.chess960
        and board.halfmove_clock + MAX_PLIES <= _MAX_COUNTER
        and board.fullmove_number + MAX_PLIES // 2 <= _MAX_COUNTER
        and board.is_valid()
    ):
        return False
    back = min(board.halfmove_clock, len(board.move_stack))
    return all(board.move_stack[-back:]) if back else True


def from_board(board: chess.Board) -> rust_chess.Board:
    """The rust_chess board of ``board``'s current position (pieces, side to move, castling
    rights as python-chess cleans them, en passant square when a capture is legal, clocks), in
    ``RepetitionDetectionMode.NONE``: whatever its clocks, it never aborts. Raises ValueError
    for a position rust_chess refuses (never one :func:`supported` accepts)."""
    return rust_chess.Board(board.fen(), mode=_NONE_MODE)


def turn(rb: rust_chess.Board) -> bool:
    """The side to move as python-chess's colour (``chess.WHITE`` is True)."""
    return rb.turn == _WHITE


def halfmove_clock(rb: rust_chess.Board) -> int:
    """Plies since the last capture or pawn move (or since the root's FEN says so)."""
    return rb.halfmove_clock


def legal_codes(rb: rust_chess.Board) -> np.ndarray:
    """The legal moves of ``rb`` as codes (int64), in python-chess's order of ``legal_moves``
    (:func:`_python_chess_order`). The move generator's state is reset first, so this mutates
    ``rb``'s generator."""
    rb.reset_move_generator()
    codes = np.fromiter(map(_CODE_GET, map(_GET_UCI, rb.generate_legal_moves())), dtype=np.int64)
    white = rb.turn == _WHITE
    ep = rb.en_passant
    return _python_chess_order(
        codes,
        np.uint64(_TO_UINT(rb.get_piece_bitboard(_RC_PAWN[white]))),
        int(rb.get_king_square(rb.turn)),
        rb.is_check(),
        -1 if ep is None else int(ep),
    )


@jit
def _python_chess_order(
    codes: np.ndarray, pawns: np.uint64, king: int, in_check: bool, ep: int
) -> np.ndarray:
    """``codes`` sorted as python-chess generates them (:func:`chessrl.search.compiled_board.order_key`)."""
    n = len(codes)
    keys = np.empty(n, dtype=np.int64)
    for i in range(n):
        keys[i] = order_key(codes[i], pawns, king, in_check, ep)
    return codes[np.argsort(keys)]


def _count_legal(rb: rust_chess.Board) -> int:
    rb.reset_move_generator()
    return rb.get_generator_num_remaining()


def code_of_move(move: chess.Move) -> int:
    """The code of a python-chess move.

    >>> code_of_move(chess.Move.from_uci("e7e8n"))
    19772
    """
    return _PROMOTION_KIND[move.promotion] * 4096 + move.from_square * 64 + move.to_square


def _rc_move(code: int) -> rust_chess.Move:
    move = _RC_MOVES[code]
    if move is None:
        move = _RC_MOVES[code] = rust_chess.Move(_UCI_OF_CODE[code])
    return move


def child(rb: rust_chess.Board, code: int) -> rust_chess.Board:
    """A new board: ``rb`` after the legal move ``code`` (``rb`` is unchanged). Legality is not
    checked again: pass a legal move only (a move from an empty square makes rust_chess abort
    the interpreter; other illegal codes give a meaningless board)."""
    return rb.make_move_new(_rc_move(code), False)


def _en_passant_legal(rb: rust_chess.Board, target: int) -> bool:
    """Whether a pawn of the side to move can legally capture en passant on ``target``."""
    white = rb.turn == _WHITE
    pawn = _RC_PAWN[white]
    file = target & 7
    for df in (-1, 1):
        if not 0 <= file + df < 8:
            continue
        src = target + df + (-8 if white else 8)
        if rb.get_piece_on(rust_chess.Square(src)) == pawn and rb.is_legal_move(_rc_move(src * 64 + target)):
            return True
    return False


def repetition_key(rb: rust_chess.Board) -> int:
    """An int per python-chess ``_transposition_key`` class (pieces, side to move, cleaned castling
    rights, the en passant square only when a capture is legal): rust_chess's 64-bit zobrist
    hash, without the en passant square when no en passant capture is legal. (Distinct keys of
    python-chess share one only on a 64-bit hash collision.)"""
    key = rb.zobrist_hash
    ep = rb.en_passant
    if ep is None or _en_passant_legal(rb, int(ep)):
        return key
    fields = rb.get_fen().split(" ")
    fields[3] = "-"
    return rust_chess.Board(" ".join(fields), mode=_NONE_MODE).zobrist_hash


def history_keys(board: chess.Board) -> list[int]:
    """:func:`repetition_key` of ``board``'s positions since its last capture or pawn move (at
    most its move stack back), oldest first, its current position last: the positions
    python-chess's ``is_repetition`` looks at. Pass a :func:`supported` board."""
    back = min(board.halfmove_clock, len(board.move_stack))
    if back == 0:
        return [repetition_key(from_board(board))]
    start = chess.Board(None)
    board._stack[-back].restore(start)
    rb = from_board(start)
    keys = [repetition_key(rb)]
    for move in board.move_stack[-back:]:
        rb = child(rb, code_of_move(move))
        keys.append(repetition_key(rb))
    return keys


def repetitions(keys: Sequence[int], halfmove_clock: int) -> int:
    """How many earlier positions equal the last of ``keys`` (a path of :func:`repetition_key`, one
    per ply, oldest first) with the same side to move and no capture or pawn move between:
    those at most ``halfmove_clock`` plies back, an even number of plies apart.

    >>> repetitions([7, 1, 7, 1, 7], 4), repetitions([7, 1, 7, 1, 7], 3)
    (2, 1)
    """
    n = len(keys)
    key = keys[n - 1]
    window = min(halfmove_clock, n - 1)
    return sum(1 for back in range(2, window + 1, 2) if keys[n - 1 - back] == key)


def _insufficient_material(rb: rust_chess.Board) -> bool:
    """python-chess's ``is_insufficient_material`` (both sides unable to mate)."""
    get = rb.get_piece_type_bitboard
    if _TO_UINT(get(rust_chess.PAWN)) or _TO_UINT(get(rust_chess.ROOK)) or _TO_UINT(get(rust_chess.QUEEN)):
        return False
    knights = _TO_UINT(get(rust_chess.KNIGHT))
    bishops = _TO_UINT(get(rust_chess.BISHOP))
    kings = _TO_UINT(get(rust_chess.KING))
    white = _TO_UINT(rb.get_color_bitboard(_WHITE))
    black = _TO_UINT(rb.get_color_bitboard(_BLACK))
    for ours, theirs in ((white, black), (black, white)):
        if ours & knights:
            if ours.bit_count() > 2 or theirs & ~kings:
                return False
        elif ours & bishops:
            same_colour = not bishops & chess.BB_DARK_SQUARES or not bishops & chess.BB_LIGHT_SQUARES
            if not same_colour or knights:
                return False
    return True


def terminal_value(rb: rust_chess.Board, repetitions: int, n_legal: int | None = None) -> float | None:
    """:func:`chessrl.search.search_board.terminal_value` of the position: -1 checkmated, 0 drawn
    (stalemate, insufficient material, a threefold repetition, a fifty-move claim, which include
    the fivefold and 75-move rules), None when the game goes on. ``repetitions`` is the number of
    earlier occurrences python-chess's ``is_repetition`` counts (:func:`repetitions`);
    ``n_legal`` the number of legal moves, when known.

    >>> terminal_value(from_board(chess.Board("3R2k1/5ppp/8/8/8/8/5PPP/6K1 b - - 1 1")), 0)
    -1.0
    >>> terminal_value(from_board(chess.Board("4k3/8/8/8/8/8/8/R3K3 w - - 99 80")), 0)   # claim
    0.0
    """
    n = _count_legal(rb) if n_legal is None else n_legal
    if n == 0:
        return -1.0 if rb.is_check() else 0.0
    if repetitions >= 2:
        return 0.0
    clock = rb.halfmove_clock
    if clock >= 100:
        return 0.0
    if clock == 99 and _fifty_by_move(rb):
        return 0.0
    if _insufficient_material(rb):
        return 0.0
    return None


def _fifty_by_move(rb: rust_chess.Board) -> bool:
    """At clock 99: a legal move that is no capture or pawn move reaches a position with clock 100
    and a legal move (python-chess's ``can_claim_fifty_moves``)."""
    for code in legal_codes(rb).tolist():
        after = child(rb, code)
        if after.halfmove_clock >= 100 and _count_legal(after):
            return True
    return False


def piece_words(rb: rust_chess.Board) -> tuple[int, ...]:
    """The 12 piece bitboards :func:`chessrl.search.board_encoding.encode_boards` uses for the position:
    the side to move's pawns, knights, bishops, rooks, queens, king, then the other side's, in
    python-chess's square numbering (not flipped)."""
    words = tuple(map(_TO_UINT, map(rb.get_piece_bitboard, _RC_PIECES)))
    return words if rb.turn == _WHITE else words[6:] + words[:6]


def constant_fields(rb: rust_chess.Board) -> tuple[bool, int, bool, bool, bool, bool, int]:
    """What :func:`chessrl.search.board_encoding.encode_boards` puts in the constant planes, unscaled:
    white to move, the full-move number, castling rights (ours kingside, ours queenside, theirs
    kingside, theirs queenside) and the half-move clock."""
    white = rb.turn == _WHITE
    w = _RIGHTS[id(rb.get_castle_rights(_WHITE))]
    b = _RIGHTS[id(rb.get_castle_rights(_BLACK))]
    ours, theirs = (w, b) if white else (b, w)
    return (white, rb.fullmove_number, *ours, *theirs, rb.halfmove_clock)
