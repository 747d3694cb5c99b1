"""How a search node gets its moves, children and priors, on an :class:`~chessrl.search.mcts_tree.ArrayTree`.

A node is added with its legal moves (:func:`new_node`, a root) or without them (:func:`make_child`:
a child is scored as finished or not from its board alone). Its moves are listed only when a
search first walks through it (:func:`ensure_edges`, :func:`ensure_edges_one` for a game searched
alone); a node the network evaluated before that kept its row of logits, and gets the softmax
of their legal entries as priors then (:func:`legal_softmax` does the same for nodes evaluated
with their moves known). :func:`finite_priors` keeps a diverged network's NaNs out of the tree.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import chess
import numpy as np

from chessrl.search import mcts_native
from chessrl.search.board_encoding import legal_indices
from chessrl.search.mcts_tree import ArrayTree, edge_ranges
from chessrl.search.search_board import child_board, leaf_terminal, terminal_value

__all__ = [
    "ensure_edges",
    "ensure_edges_one",
    "finite_priors",
    "legal_softmax",
    "make_child",
    "nan_or",
    "new_node",
    "segment_softmax",
]


def nan_or(value: float | None) -> float:
    return math.nan if value is None else value


#: Search standard games on native boards (:mod:`chessrl.search.mcts_native`); False: python-chess
#: boards throughout (the reference; chess960 and variants always take it).
NATIVE_BOARDS = True


def new_node(tree: ArrayTree, board: chess.Board) -> int:
    """Add ``board`` (the tree's own copy) to ``tree`` with its legal moves and action indices,
    and its exact value when the game is over there (a native node when it can be)."""
    if NATIVE_BOARDS:
        i = mcts_native.new_root(tree, board)
        if i is not None:
            return i
    moves, actions = legal_indices(board, cache=False)  # a tree meets few transpositions
    return tree.add_node(board, moves, actions, nan_or(terminal_value(board, len(moves))))


def make_child(tree: ArrayTree, node: int, i: int) -> int:
    """The child of ``node`` after its ``i``-th move, created on first use without its moves
    (:func:`ensure_edges` lists them when the search first walks through it); a child that is
    checkmated makes ``i`` the node's mate."""
    e = int(tree.first[node]) + i
    c = int(tree.child[e])
    if c < 0 and tree.native[node] is not None:
        return mcts_native.make_child(tree, node, i)
    if c < 0:
        board = child_board(tree.boards[node], tree.moves[node][i])  # type: ignore[index]
        c = tree.add_node(board, None, None, nan_or(leaf_terminal(board)))
        tree.child[e] = c
        if tree.terminal[c] < 0:
            tree.mate[node] = i
    return c


def segment_softmax(flat: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The softmax of each segment (of the non-zero ``lengths``) of ``flat`` logits (float64)."""
    lens = lengths[lengths > 0]
    if len(lens) == 0:
        return np.zeros(0, dtype=np.float64)
    starts = np.concatenate(([0], np.cumsum(lens)[:-1]))
    segment = np.repeat(np.arange(len(lens)), lens)
    flat = np.exp(flat - np.maximum.reduceat(flat, starts)[segment])
    flat /= np.add.reduceat(flat, starts)[segment]
    return flat


def legal_softmax(
    logits: np.ndarray, rows: np.ndarray, actions: Sequence[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """The softmax of ``logits[rows[k]]`` over ``actions[k]`` for every k with moves,
    concatenated (float64), and the lengths."""
    lengths = np.array([len(a) for a in actions], dtype=np.int64)
    keep = lengths > 0
    if not keep.any():
        return np.zeros(0, dtype=np.float64), lengths
    flat_rows = np.repeat(rows[keep], lengths[keep])
    flat = logits[flat_rows, np.concatenate([a for a in actions if len(a)])].astype(np.float64)
    return segment_softmax(flat, lengths), lengths


def finite_priors(flat: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``flat`` priors (segments of ``counts``) with every segment holding a non-finite number
    replaced by uniform priors (a diverged network: search on)."""
    bad = ~np.isfinite(flat)
    if bad.any():
        rows = np.repeat(np.arange(len(counts)), counts)
        broken = np.zeros(len(counts), dtype=bool)
        broken[rows[bad]] = True
        flat = np.where(broken[rows], 1.0 / np.maximum(counts[rows], 1), flat)
    return flat


def ensure_edges_one(tree: ArrayTree, node: int) -> None:
    """:func:`ensure_edges` for one node whose moves are not listed yet."""
    if tree.native[node] is not None:
        mcts_native.list_edges(tree, np.array([node]))
        actions = tree.action[tree.edges(node)]
    else:
        moves, actions = legal_indices(tree.boards[node], cache=False)
        tree.add_edges(node, moves, actions)
    logits = tree.take_logits(node)
    if logits is None:
        return
    _set_priors_from_logits(tree, np.array([node]), [logits[actions]])


def ensure_edges(tree: ArrayTree, nodes: np.ndarray) -> None:
    """List the legal moves of the ``nodes`` that have none yet, and give those already
    evaluated their priors from the logits kept for them (one softmax for all)."""
    ready = tree.ready[nodes]
    if ready.all():
        return
    todo = np.unique(nodes[~ready]).tolist()
    native = [i for i in todo if tree.native[i] is not None]
    plain = [i for i in todo if tree.native[i] is None]
    listed = [legal_indices(tree.boards[i], cache=False) for i in plain]
    if plain:
        tree.add_edges_many(plain, [m for m, _ in listed], [a for _, a in listed])
    if native:
        mcts_native.list_edges(tree, np.array(native, dtype=np.int64))
    with_logits: list[int] = []
    gathered: list[np.ndarray] = []
    for i in (i for i in todo if tree.lrow[i] >= 0):
        logits = tree.take_logits(i)
        with_logits.append(i)
        gathered.append(logits[tree.action[tree.edges(i)]])  # type: ignore[index]
    if with_logits:
        _set_priors_from_logits(tree, np.array(with_logits, dtype=np.int64), gathered)


def _set_priors_from_logits(tree: ArrayTree, ids: np.ndarray, gathered: list[np.ndarray]) -> None:
    """Give ``ids`` (moves listed, evaluated earlier) the softmax of their kept legal logits
    (``gathered[k]``, aligned with node k's moves) as priors, in one softmax for all."""
    counts = tree.count[ids]
    flat = finite_priors(segment_softmax(np.concatenate(gathered).astype(np.float64), counts), counts)
    idx, _ = edge_ranges(tree.first[ids], counts)
    tree.P[idx] = flat
    tree.Psel[idx] = flat
