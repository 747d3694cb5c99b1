"""Search nodes on native boards: the tree's board work in ``rust_chess``, python-chess's answers.

A node of a standard game (:func:`chessrl.search.native_board.supported`) keeps a ``rust_chess`` board
(``tree.native[i]``): listing its moves (:func:`list_edges`, as board_encoding codes in python-chess's
order, mapped to action indices in one array lookup), making a child (:func:`make_child`), the end-of-game test
and the repetition count (keys along the tree path, then the root's game: :meth:`ArrayTree.
earlier_keys`) run in the native library, and the input planes (:func:`planes`, from the nodes'
bitboards and their ancestors', as :func:`chessrl.search.board_encoding.encode_boards` computes them
from python-chess boards) in one compiled call. Its python-chess board is made only when something asks
for it (:meth:`ArrayTree.board`). Everything here gives python-chess's answer; the unit tests
compare the two on random games.

>>> from chessrl.search.mcts_tree import ArrayTree
>>> tree = ArrayTree()
>>> root = new_root(tree, chess.Board())
>>> tree.native[root] is not None, int(tree.count[root])
(True, 20)
>>> child = make_child(tree, root, 0)
>>> tree.board(child).move_stack == [tree.move_list(root)[0]]
True
>>> planes(tree, np.array([child]), 2).shape
(1, 35, 8, 8)
"""

from __future__ import annotations

import math

import chess
import numpy as np

from chessrl.search import native_board as nb
from chessrl.search.board_encoding import (
    _ACTION_OF_CODE,
    MOVE_COUNT_SCALE,
    NO_PROGRESS_SCALE,
    encode_boards,
    input_channels,
)
from chessrl.search.compiled import jit
from chessrl.search.mcts_tree import ArrayTree
from chessrl.search.search_board import terminal_value

__all__ = ["first_mate", "list_edges", "make_child", "new_root", "planes"]


def _nan_or(value: float | None) -> float:
    return math.nan if value is None else value


def _actions(rb: object, codes: np.ndarray) -> np.ndarray:
    return _ACTION_OF_CODE[int(nb.turn(rb))][codes]


def new_root(tree: ArrayTree, board: chess.Board) -> int | None:
    """Add ``board`` (the tree's own copy) as a native root with its legal moves, or return
    None when the native library cannot stand in for python-chess there (the caller falls back).
    Its game's earlier positions (since the last irreversible move) give their keys to ``hist``."""
    if not nb.supported(board):
        return None
    try:  # an earlier position python-chess plays through may be one rust_chess refuses
        hist = tuple(reversed(nb.history_keys(board)[:-1]))  # the game's earlier positions, newest first
        rb = nb.from_board(board)
    except ValueError:
        return None
    codes = nb.legal_codes(rb)
    terminal = _nan_or(terminal_value(board, len(codes)))
    i = tree.add_node(board, None, None, terminal, native=rb, key=nb.repetition_key(rb))
    tree.add_edges(i, None, _actions(rb, codes), codes)
    tree.clock[i] = board.halfmove_clock
    tree.stacked[i] = bool(board.move_stack)
    _parts(tree, i, rb)
    tree.hist[i] = hist
    tree.rep[i] = hist[1::2].count(tree.keys[i])
    return i


def list_edges(tree: ArrayTree, nodes: list[int]) -> list[np.ndarray]:
    """Give native ``nodes`` (moves not listed yet) their edges; returns their action indices."""
    codes = [nb.legal_codes(tree.native[i]) for i in nodes]
    actions = [_actions(tree.native[i], c) for i, c in zip(nodes, codes, strict=True)]
    tree.add_edges_many(nodes, None, actions, codes)
    return actions


def make_child(tree: ArrayTree, node: int, i: int) -> int:
    """The native child of ``node`` after its ``i``-th move, without its moves listed; scored as
    finished or not (a repetition counted along the game); a checkmated child makes ``i`` the
    node's mate."""
    e = int(tree.first[node]) + i
    code = int(tree.code[e])
    rb = nb.child(tree.native[node], code)
    key = nb.repetition_key(rb)
    clock = nb.halfmove_clock(rb)
    # the same side to move: 2, 4, ... plies back, the first of them the node's parent's
    rep = tree.earlier_keys(node, clock - 1)[::2].count(key) if clock >= 4 else 0
    c = tree.add_node(None, None, None, _nan_or(nb.terminal_value(rb, rep)), native=rb, key=key)
    tree.parent[c] = node
    tree.pcode[c] = code
    tree.clock[c] = clock
    tree.rep[c] = rep
    _parts(tree, c, rb)
    tree.child[e] = c
    if tree.terminal[c] < 0:
        tree.mate[node] = i
    return c


def first_mate(tree: ArrayTree, node: int) -> int | None:
    """The first of native ``node``'s moves (edges listed) that checkmates at once, or None."""
    rb = tree.native[node]
    for i, code in enumerate(tree.code[tree.edges(node)].tolist()):
        after = nb.child(rb, code)
        if after.is_check() and nb.terminal_value(after, 0) == -1.0:
            return i
    return None


def _parts(tree: ArrayTree, i: int, rb: object) -> None:
    """Keep node ``i``'s input-plane parts: its piece bitboards and constant planes' values."""
    tree.pieces[i] = nb.piece_words(rb)
    white, fullmove, ok, oq, tk, tq, clock = nb.constant_fields(rb)
    tree.consts[i] = (
        1.0 if white else 0.0,
        fullmove / MOVE_COUNT_SCALE,
        ok,
        oq,
        tk,
        tq,
        clock / NO_PROGRESS_SCALE,
    )


def planes(tree: ArrayTree, ids: np.ndarray, history: int) -> np.ndarray:
    """The input planes of nodes ``ids`` (native or not), equal to ``encode_boards`` of their
    python-chess boards: a native node's history steps are its ancestors' bitboards (written by
    one compiled call for all of them); one whose history reaches above its root into the game
    before it, or a python-chess node, is encoded from its python-chess board."""
    n = len(ids)
    out = np.zeros((n, input_channels(history), 8, 8), dtype=np.float32)
    if n == 0:
        return out
    native = np.fromiter((tree.native[i] is not None for i in ids.tolist()), dtype=bool, count=n)
    fallback = _fill_planes(
        out, ids, native, tree.parent, tree.pieces, tree.rep, tree.consts, tree.stacked, history
    )
    rows = np.flatnonzero(fallback)
    if len(rows):
        out[rows] = encode_boards([tree.board(int(ids[r])) for r in rows], history)
    return out


@jit
def _fill_planes(
    out: np.ndarray,
    ids: np.ndarray,
    native: np.ndarray,
    parent: np.ndarray,
    pieces: np.ndarray,
    rep: np.ndarray,
    consts: np.ndarray,
    stacked: np.ndarray,
    history: int,
) -> np.ndarray:
    """Write the planes of the native ``ids`` into ``out`` (zeros), as ``encode_boards`` lays them
    out; returns the rows left to python-chess (not native, or history above a stacked root)."""
    fallback = ~native
    one = np.uint64(1)
    for r in range(len(ids)):
        if fallback[r]:
            continue
        node = ids[r]
        black = consts[node, 0] == 0.0
        j = node
        top = node
        for step in range(history):
            if j < 0:
                fallback[r] = stacked[top]  # the game before the root: python-chess has it
                break
            base = step * 14
            for p in range(12):
                w = pieces[j, p if step % 2 == 0 else (p + 6) % 12]  # a ply back: theirs and ours swap
                if w == 0:
                    continue
                for sq in range(64):
                    if (w >> np.uint64(sq)) & one:
                        rank = 7 - (sq >> 3) if black else sq >> 3
                        out[r, base + p, rank, sq & 7] = 1.0
            if rep[j] >= 1:
                out[r, base + 12] = 1.0
            if rep[j] >= 2:
                out[r, base + 13] = 1.0
            top = j
            j = parent[j]
        for c in range(7):
            out[r, 14 * history + c] = consts[node, c]
    return fallback
