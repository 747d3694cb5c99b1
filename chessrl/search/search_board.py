"""Exact python-chess board operations for the search's inner loop, in fewer Python steps.

A python-chess node of a :class:`chessrl.search.mcts.BatchedMCTS` tree (Chess960, other board classes,
or with ``mcts_leaves.NATIVE_BOARDS`` off: a standard game's nodes are native,
:mod:`chessrl.search.mcts_native`) is a ``chess.Board``: the search copies its
parent's board and plays one move on it (:func:`child_board`), asks whether the game is over
there without listing its moves (:func:`leaf_terminal`), and at a root looks for a mate in one
among the moves that may give check (:func:`may_check`). Each gives python-chess's own answer,
which the unit tests check over many random games; a board of another class (a variant) or a
Chess960 board goes through python-chess itself.

>>> board = child_board(chess.Board(), chess.Move.from_uci("e2e4"))
>>> board.fen() == "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1", len(board.move_stack)
(True, 1)
>>> terminal_value(chess.Board("3R2k1/5ppp/8/8/8/8/5PPP/6K1 b - - 1 1"))   # checkmated
-1.0
"""

from __future__ import annotations

from typing import Any

import chess

from chessrl.search.board_encoding import copy_board

__all__ = [
    "child_board",
    "copy_fast",
    "leaf_terminal",
    "may_check",
    "maybe_threefold",
    "surely_movable",
    "terminal_value",
]


def maybe_threefold(board: chess.Board) -> bool:
    """False when ``board.is_repetition(3)`` is surely False: python-chess looks for the position
    among those since the last irreversible move (so at most ``halfmove_clock`` plies back) with
    the same side to move (an even number of plies back); here only their occupancy is compared,
    over those plies instead of the whole game."""
    stack = board._stack
    occupied = board.occupied
    window = min(board.halfmove_clock, len(stack))
    seen = 0
    for back in range(2, window + 1, 2):
        if stack[-back].occupied == occupied:
            seen += 1
            if seen >= 2:
                return True
    return False


def terminal_value(board: chess.Board, legal_moves: int | None = None) -> float | None:
    """The exact value of a finished game for the side to move (-1 checkmated, 0 drawn), or None.

    Draws: stalemate, insufficient material, the 75-move and fivefold rules (as
    ``board.outcome(claim_draw=False)``), and also a threefold repetition or a fifty-move claim.

    >>> terminal_value(chess.Board("6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1"))   # None: play on
    >>> terminal_value(chess.Board("3R2k1/5ppp/8/8/8/8/5PPP/6K1 b - - 1 1"))
    -1.0
    >>> terminal_value(chess.Board("7k/8/8/8/8/8/8/K7 w - - 0 1"))   # bare kings
    0.0
    """
    n = board.legal_moves.count() if legal_moves is None else legal_moves
    if n == 0:
        return -1.0 if board.is_check() else 0.0
    if not (board.pawns | board.rooks | board.queens) and board.is_insufficient_material():
        return 0.0
    # a threefold repetition needs at least 8 reversible plies; it includes the fivefold rule
    if board.halfmove_clock >= 8 and maybe_threefold(board) and board.is_repetition(3):
        return 0.0
    if board.halfmove_clock >= 99 and board.can_claim_fifty_moves():  # includes the 75-move rule
        return 0.0
    return None


#: Per square, the squares on a line (rank, file, diagonal) with it: a piece off every line
#: through its king cannot be pinned.
_LINES = [
    chess.BB_DIAG_ATTACKS[s][0] | chess.BB_RANK_ATTACKS[s][0] | chess.BB_FILE_ATTACKS[s][0] for s in range(64)
]


def may_check(board: chess.Board, move: chess.Move) -> bool:
    """False when ``move`` surely gives no check (python-chess's ``gives_check`` plays the move
    to know): it neither lands where its piece, or a knight or pawn, could attack the other king
    from, nor leaves a line through that king (a discovered check), nor is a promotion,
    castling or an en passant capture."""
    king_mask = board.kings & board.occupied_co[not board.turn]
    if not king_mask or type(board) is not chess.Board:
        return True
    king = king_mask.bit_length() - 1
    lines = _LINES[king]
    to_bb = 1 << move.to_square
    if (1 << move.from_square) & lines or to_bb & lines or move.promotion:
        return True
    if to_bb & (chess.BB_KNIGHT_ATTACKS[king] | chess.BB_PAWN_ATTACKS[not board.turn][king]):
        return True
    # en passant, castling (a king move: rare enough to ask python-chess)
    return move.to_square == board.ep_square or bool((1 << move.from_square) & board.kings)


def surely_movable(board: chess.Board) -> bool:
    """True when the side to move, not in check, has a knight or a pawn off the lines through
    its king (so not pinned) with a move; False says nothing."""
    turn = board.turn
    ours = board.occupied_co[turn]
    king_mask = board.kings & ours
    if not king_mask:
        return False
    free = ours & ~_LINES[king_mask.bit_length() - 1]
    pawns = board.pawns & free
    if pawns and (pawns << 8 if turn else pawns >> 8) & ~board.occupied & chess.BB_ALL:
        return True
    knights = board.knights & free
    while knights:
        sq = knights.bit_length() - 1
        if chess.BB_KNIGHT_ATTACKS[sq] & ~ours:
            return True
        knights ^= 1 << sq
    return False


def leaf_terminal(board: chess.Board) -> float | None:
    """:func:`terminal_value` without listing the moves: a side not in check with an unpinned
    knight or pawn that can move has a move; else python-chess's generator, up to the first."""
    check = board.is_check()
    if not (not check and surely_movable(board)) and not any(board.generate_legal_moves()):
        return -1.0 if check else 0.0
    return terminal_value(board, 1)


#: The search's board copy is :func:`~chessrl.search.board_encoding.copy_board` (kept under this name).
copy_fast = copy_board


_BACK_RANK = {chess.WHITE: chess.BB_RANK_1, chess.BLACK: chess.BB_RANK_8}
_KING_HOMES = chess.BB_E1 | chess.BB_E8


def child_board(board: chess.Board, move: chess.Move) -> chess.Board:
    """A copy of ``board`` with the legal ``move`` played: ``board.copy()`` then ``push(move)``,
    the same board, move stack and saved states. An ordinary move (no promotion, castling, en
    passant capture, or king move from its home square) is played here in a few bitboard
    operations; the others, and boards python-chess would treat differently (Chess960, other
    classes), by ``push`` itself.

    >>> board = chess.Board("r3k2r/8/8/8/8/8/8/R3K2R w KQkq - 0 1")
    >>> child_board(board, chess.Move.from_uci("a1a8")).fen().split()[2]   # rook takes rook
    'Kk'
    """
    src = board.__dict__
    from_bb = 1 << move.from_square
    to_bb = 1 << move.to_square
    if (
        type(board) is not chess.Board
        or src["chess960"]
        or not move  # a null move
        or move.promotion
        or move.drop
        or from_bb & src["kings"] & _KING_HOMES
        or to_bb & src["kings"]
        or (move.to_square == src["ep_square"] and from_bb & src["pawns"])
    ):
        child = copy_fast(board)
        child.push(move)
        return child
    stack = src["_stack"]
    castling = src["castling_rights"] if stack else board.clean_castling_rights()
    stack = [*stack, chess._BoardState(board)]
    child = object.__new__(chess.Board)
    state = child.__dict__
    state.update(src)
    state.update(
        _ordinary_move_fields(src, move, from_bb, to_bb, castling),
        move_stack=[*src["move_stack"], move],
        _stack=stack,
    )
    return child


def _ordinary_move_fields(
    src: dict[str, Any], move: chess.Move, from_bb: int, to_bb: int, castling: int
) -> dict[str, Any]:
    """The board fields :func:`child_board`'s ordinary ``move`` changes (from ``from_bb`` to
    ``to_bb``) but the move stack and saved states: the pieces, the side to move, the castling
    rights (``castling``: the parent's cleaned ones), en passant and the clocks. ``src``: the
    parent board's ``__dict__``."""
    turn = src["turn"]
    pawns, knights, bishops, rooks = src["pawns"], src["knights"], src["bishops"], src["rooks"]
    queens, kings, promoted = src["queens"], src["kings"], src["promoted"]
    ours, theirs = src["occupied_co"][turn], src["occupied_co"][not turn]
    touched = from_bb | to_bb
    clock = 0 if touched & pawns or touched & theirs else src["halfmove_clock"] + 1
    # the piece's board loses the from-square and gains the target; every other board loses the
    # target (a capture; a piece of the mover's kind there keeps its bit, taken or not)
    keep = ~to_bb
    ep_square = None
    castling &= ~touched
    if pawns & from_bb:
        pawns = (pawns ^ from_bb) | to_bb
        diff = move.to_square - move.from_square
        if diff == 16 and move.from_square >> 3 == 1:
            ep_square = move.from_square + 8
        elif diff == -16 and move.from_square >> 3 == 6:
            ep_square = move.from_square - 8
    else:
        pawns &= keep
    knights = (knights ^ from_bb) | to_bb if knights & from_bb else knights & keep
    bishops = (bishops ^ from_bb) | to_bb if bishops & from_bb else bishops & keep
    rooks = (rooks ^ from_bb) | to_bb if rooks & from_bb else rooks & keep
    queens = (queens ^ from_bb) | to_bb if queens & from_bb else queens & keep
    if kings & from_bb:
        kings = (kings ^ from_bb) | to_bb
        if not promoted & from_bb:
            castling &= ~_BACK_RANK[turn]
    if promoted:
        promoted = (promoted & ~from_bb & keep) | (to_bb if promoted & from_bb else 0)
    ours = (ours ^ from_bb) | to_bb
    theirs &= keep
    return {
        "pawns": pawns,
        "knights": knights,
        "bishops": bishops,
        "rooks": rooks,
        "queens": queens,
        "kings": kings,
        "occupied_co": [theirs, ours] if turn else [ours, theirs],
        "occupied": ours | theirs,
        "promoted": promoted,
        "turn": not turn,
        "castling_rights": castling,
        "ep_square": ep_square,
        "halfmove_clock": clock,
        "fullmove_number": src["fullmove_number"] + (turn == chess.BLACK),
    }
