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
from typing import Any

import chess
import numpy as np

from chessrl.search.move_codes import KIND_PIECE, legal_codes
from chessrl.search.move_codes import MOVE_OF_CODE as _MOVE_OF_CODE  # mcts_tree imports it from here
from chessrl.search.move_codes import legal_moves as legal_moves

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
    "legal_moves",
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
#: players and arenas ask again for the moves of positions they have just seen.
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
    if type(board) is chess.Board:  # its state is ints plus three lists: a few dict operations
        new = object.__new__(chess.Board)
        state = new.__dict__
        state.update(board.__dict__)
        state["occupied_co"] = board.occupied_co.copy()
        state["move_stack"] = board.move_stack.copy()
        state["_stack"] = board._stack.copy()
        return new
    copy = board.copy(stack=False)
    copy.move_stack = board.move_stack.copy()
    copy._stack = board._stack.copy()
    return copy


_LEGAL_CACHE: OrderedDict[Hashable, tuple[list[chess.Move], np.ndarray]] = OrderedDict()


def legal_indices(board: chess.Board, *, cache: bool = True) -> tuple[list[chess.Move], np.ndarray]:
    """The legal moves of ``board`` and their action indices (``int64``, read-only), in the same
    order. With ``cache`` they are remembered for the last :data:`LEGAL_CACHE_SIZE` positions (the
    list handed out is a copy); a search tree, which meets few transpositions, passes False.

    >>> moves, indices = legal_indices(chess.Board())
    >>> len(moves), indices.dtype, len(set(indices.tolist())), indices.flags.writeable
    (20, dtype('int64'), 20, False)
    """
    if not cache:
        moves, indices = _legal_indices(board)
        indices.flags.writeable = False
        return moves, indices
    key = (board._transposition_key(), board.chess960)
    cached = _LEGAL_CACHE.get(key)
    if cached is not None:
        with contextlib.suppress(KeyError):  # another thread may have just dropped it
            _LEGAL_CACHE.move_to_end(key)
        return list(cached[0]), cached[1]
    moves, indices = _legal_indices(board)
    indices.flags.writeable = False  # shared with the cache: no copy needed
    _LEGAL_CACHE[key] = (moves, indices)
    if len(_LEGAL_CACHE) > LEGAL_CACHE_SIZE:
        _LEGAL_CACHE.popitem(last=False)
    return list(moves), indices


def _build_action_of_code() -> np.ndarray:
    """``[turn, code]`` -> action index (-1 where the code has no action), as ``move_to_index``."""
    table = np.full((2, 5 * 4096), -1, dtype=np.int64)
    codes = np.arange(5 * 4096)
    kind, f, t = codes // 4096, codes % 4096 // 64, codes % 64
    for turn, flip in ((chess.WHITE, 0), (chess.BLACK, 56)):
        src, dst = f ^ flip, t ^ flip
        plane = _PLANE_OF[src, dst].astype(np.int64)
        df = (dst & 7) - (src & 7)
        under = (kind >= 2) & (src >> 3 == 6) & (dst >> 3 == 7) & (np.abs(df) <= 1)
        piece = np.array(KIND_PIECE[2:])[np.clip(kind - 2, 0, 2)]  # rook, bishop, knight
        plane = np.where(
            under, _FIRST_UNDER_PLANE + (df + 1) * 3 + (piece.astype(np.int64) - chess.KNIGHT), plane
        )
        plane = np.where((kind >= 2) & ~under, -1, plane)
        table[int(turn)] = np.where(plane >= 0, plane * 64 + src, -1)
    return table


_ACTION_OF_CODE = _build_action_of_code()


def _legal_indices(board: chess.Board) -> tuple[list[chess.Move], np.ndarray]:
    codes = legal_codes(board)
    table = _MOVE_OF_CODE
    return [table[c] for c in codes], _ACTION_OF_CODE[int(board.turn)][np.array(codes, dtype=np.int64)]


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

    Per history step (now, one ply back, ...): our 6 piece planes, theirs, and two repetition
    planes (the position was seen at least once / twice before, as python-chess's
    ``is_repetition`` counts it); then the colour, move count, castling rights and no-progress
    planes. Steps before the game's start are zeros.

    >>> board = chess.Board()
    >>> for uci in ["g1f3", "g8f6", "f3g1", "f6g8"]:
    ...     board.push(chess.Move.from_uci(uci))
    >>> planes = encode_board(board, history=1)
    >>> float(planes[12].min()), float(planes[13].max())   # seen once before, not twice
    (1.0, 0.0)
    """
    return encode_boards([board], history)[0]


def _state_fields(s: Any, white: bool) -> tuple[int, ...]:
    """A ``_BoardState``'s pieces as (pawns, knights, bishops, rooks, queens, kings, ours, theirs)."""
    ours, theirs = (s.occupied_w, s.occupied_b) if white else (s.occupied_b, s.occupied_w)
    return (s.pawns, s.knights, s.bishops, s.rooks, s.queens, s.kings, ours, theirs)


def _key_back(board: chess.Board, step: int, keys: dict[int, Hashable]) -> Hashable:
    """python-chess's transposition key of ``board``'s position ``step`` plies back, from its
    saved states without popping moves (memoised in ``keys``)."""
    key = keys.get(step)
    if key is not None:
        return key
    states = board._stack
    depth = len(states)
    if step == 0:
        key = board._transposition_key()
    else:
        state = states[depth - step]
        if state.ep_square is not None or step == depth:
            # python-chess's key: en passant only when legal, castling rights cleaned at the
            # game's start; both need a board, so restore the state into a scratch one
            scratch = chess.Board(None, chess960=board.chess960)
            state.restore(scratch)
            scratch._stack = [] if step == depth else [state]
            key = scratch._transposition_key()
        else:
            key = (
                state.pawns,
                state.knights,
                state.bishops,
                state.rooks,
                state.queens,
                state.kings,
                state.occupied_w,
                state.occupied_b,
                state.turn,
                state.castling_rights,
                None,
            )
    keys[step] = key
    return key


def _castling_planes(board: chess.Board, us: chess.Color) -> tuple[bool, bool, bool, bool]:
    """Our kingside and queenside castling rights, then theirs, as python-chess's
    ``has_kingside_castling_rights``/``has_queenside_castling_rights``: in standard chess the
    cleaned rights keep a corner rook's square only while its king is at home, so each is a bit
    test."""
    if board.chess960:
        return (
            board.has_kingside_castling_rights(us),
            board.has_queenside_castling_rights(us),
            board.has_kingside_castling_rights(not us),
            board.has_queenside_castling_rights(not us),
        )
    rights = board.clean_castling_rights()
    white = (bool(rights & chess.BB_H1), bool(rights & chess.BB_A1))
    black = (bool(rights & chess.BB_H8), bool(rights & chess.BB_A8))
    return (*white, *black) if us == chess.WHITE else (*black, *white)


def encode_boards(boards: Sequence[chess.Board], history: int = 8) -> np.ndarray:
    """:func:`encode_board` of each board, stacked: ``(len(boards), input_channels(history), 8, 8)``.

    The history comes from each board's saved states (``board._stack``) without popping moves,
    and the planes of all boards are unpacked from their bitboards in one go.

    >>> encode_boards([chess.Board()] * 3, history=2).shape
    (3, 35, 8, 8)
    """
    if history < 1:
        raise ValueError(f"history must be at least 1, got {history}")
    n = len(boards)
    out = np.zeros((n, input_channels(history), 8, 8), dtype=np.float32)
    if n == 0:
        return out
    words: list[int] = []  # n * history * 12 piece bitboards, zeros before a game's start
    repeats = np.zeros((n, history, 2), dtype=np.float32)
    constants: list[tuple[float, ...]] = []
    for b, board in enumerate(boards):
        limit = _add_piece_words(board, history, words)
        _mark_repetitions(board, history, limit, repeats[b])
        constants.append(_constants(board))
    _fill_planes(out, words, repeats, np.array(constants, dtype=np.float32), history)
    return out


def _add_piece_words(board: chess.Board, history: int, words: list[int]) -> int:
    """Append ``board``'s 12 piece bitboards (ours, then theirs) for each of ``history`` steps to
    ``words``, zeros before the game's start; returns how many plies back a repetition of those
    positions may lie (the history, and each step's no-progress clock)."""
    us = board.turn
    states = board._stack
    depth = len(states)
    steps = min(history, depth + 1)  # history steps since the game's start
    limit = history - 1  # how far back positions are needed: history, and repetitions of it
    for step in range(steps):
        if step == 0:
            pawns, knights, bishops, rooks, queens, kings = (
                board.pawns,
                board.knights,
                board.bishops,
                board.rooks,
                board.queens,
                board.kings,
            )
            ours, theirs = board.occupied_co[us], board.occupied_co[not us]
            clock = board.halfmove_clock
        else:
            state = states[depth - step]
            pawns, knights, bishops, rooks, queens, kings, ours, theirs = _state_fields(state, us)
            clock = state.halfmove_clock
        words += (
            pawns & ours,
            knights & ours,
            bishops & ours,
            rooks & ours,
            queens & ours,
            kings & ours,
            pawns & theirs,
            knights & theirs,
            bishops & theirs,
            rooks & theirs,
            queens & theirs,
            kings & theirs,
        )
        limit = max(limit, step + clock)
    words += [0] * (12 * (history - steps))
    return limit


def _mark_repetitions(board: chess.Board, history: int, limit: int, repeats: np.ndarray) -> None:
    """Set ``repeats[i]`` (``(history, 2)``) where history step ``i``'s position occurred once /
    twice before, among the positions up to ``limit`` plies back."""
    states = board._stack
    depth = len(states)
    back = min(limit, depth)
    if back >= 2:
        # only a position with the same occupancy (an even number of plies apart) can repeat
        # one: full keys are made for those alone, and none when no occupancy comes twice
        occupancy = [(board.occupied_co[chess.WHITE], board.occupied_co[chess.BLACK])]
        occupancy += [(s.occupied_w, s.occupied_b) for s in reversed(states[depth - back :])]
        if len(set(occupancy)) < len(occupancy):
            keys: dict[int, Hashable] = {}
            for i in range(min(history, len(occupancy))):
                same = [j for j in range(i + 2, len(occupancy), 2) if occupancy[j] == occupancy[i]]
                if same:
                    key = _key_back(board, i, keys)
                    seen = sum(_key_back(board, j, keys) == key for j in same)
                    repeats[i] = (seen >= 1, seen >= 2)


def _constants(board: chess.Board) -> tuple[float, ...]:
    """``board``'s constant planes' values: colour, move count, castling rights, no-progress."""
    us = board.turn
    return (
        1.0 if us == chess.WHITE else 0.0,
        board.fullmove_number / MOVE_COUNT_SCALE,
        *_castling_planes(board, us),
        board.halfmove_clock / NO_PROGRESS_SCALE,
    )


def _fill_planes(
    out: np.ndarray, words: list[int], repeats: np.ndarray, constant_planes: np.ndarray, history: int
) -> None:
    """Write into ``out`` the piece planes unpacked from ``words`` (flipped for black to move),
    the repetition planes and the constant planes."""
    n = out.shape[0]
    bits = np.unpackbits(np.array(words, dtype="<u8").view(np.uint8), bitorder="little")
    pieces = bits.reshape(n, history, 12, 8, 8)
    black = np.flatnonzero(constant_planes[:, 0] == 0.0)
    if len(black):
        pieces[black] = pieces[black][:, :, :, ::-1, :]  # rank 8 is black's first row
    view = out[:, : PLANES_PER_STEP * history].reshape(n, history, PLANES_PER_STEP, 8, 8)
    view[:, :, :12] = pieces
    view[:, :, 12:14] = repeats[:, :, :, None, None]
    out[:, PLANES_PER_STEP * history :] = constant_planes[:, :, None, None]
