"""Search nodes on native boards: the tree's board work in ``rust_chess``, python-chess's answers.

A node of a standard game (:func:`chessrl.native_board.supported`) keeps a ``rust_chess`` board
(``tree.native[i]``): listing its moves (:func:`list_edges`, as board_encoding codes in python-chess's
order, mapped to action indices in one array lookup), making a child (:func:`make_child`), the end-of-game test
and the repetition count (keys along the tree path, then the root's game: :meth:`ArrayTree.
earlier_keys`) and the input planes (:func:`planes`, from the nodes' bitboards and their
ancestors', as :func:`chessrl.board_encoding.encode_boards` computes them from python-chess
boards) all run in the native library. Its python-chess board is made only when something asks
for it (:meth:`ArrayTree.board`). Everything here gives python-chess's answer; the unit tests
compare the two on random games.

>>> from chessrl.mcts_tree import ArrayTree
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

from chessrl import native_board as nb
from chessrl.board_encoding import _ACTION_OF_CODE, encode_boards, planes_from_words
from chessrl.mcts_tree import ArrayTree
from chessrl.search_board import terminal_value

__all__ = ["list_edges", "make_child", "new_root", "planes"]


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
    rb = nb.from_board(board)
    codes = nb.legal_codes(rb)
    terminal = _nan_or(terminal_value(board, len(codes)))
    i = tree.add_node(board, None, None, terminal, native=rb, key=nb.repetition_key(rb))
    tree.add_edges(i, None, _actions(rb, codes), codes)
    tree.clock[i] = board.halfmove_clock
    hist = tuple(reversed(nb.history_keys(board)[:-1]))  # the game's earlier positions, newest first
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
    tree.child[e] = c
    if tree.terminal[c] < 0:
        tree.mate[node] = i
    return c


def _words(tree: ArrayTree, i: int) -> tuple[int, ...]:
    words = tree.words[i]
    if words is None:
        words = nb.piece_words(tree.native[i])
        tree.words[i] = words
    return words


def planes(tree: ArrayTree, ids: np.ndarray, history: int) -> np.ndarray:
    """The input planes of nodes ``ids`` (native or not), equal to ``encode_boards`` of their
    python-chess boards: a native node's history steps are its ancestors' bitboards; one whose
    history reaches above its root into the game is encoded from its python-chess board."""
    words: list[int] = []
    repeats = np.zeros((len(ids), history, 2), dtype=np.float32)
    constants: list[tuple[float, ...]] = []
    fallback: list[int] = []
    for row, i in enumerate(ids.tolist()):
        chain = [i]
        if tree.native[i] is not None:
            while len(chain) < history and tree.parent[chain[-1]] >= 0:
                chain.append(int(tree.parent[chain[-1]]))
        if tree.native[i] is None or (len(chain) < history and tree.board(chain[-1]).move_stack):
            fallback.append(row)
            words += [0] * (12 * history)
            constants.append((1.0,) + (0.0,) * 6)
            continue
        for step, j in enumerate(chain):
            w = _words(tree, j)  # ours and theirs as seen by j's side to move: one ply back, swapped
            words += w[6:] + w[:6] if step % 2 else w
            rep = int(tree.rep[j])
            repeats[row, step] = (rep >= 1, rep >= 2)
        words += [0] * (12 * (history - len(chain)))
        white, fullmove, ok, oq, tk, tq, clock = nb.constant_fields(tree.native[i])
        constants.append((1.0 if white else 0.0, fullmove / 100.0, ok, oq, tk, tq, clock / 100.0))
    out = planes_from_words(words, repeats, constants, history)
    if fallback:
        out[fallback] = encode_boards([tree.board(int(ids[r])) for r in fallback], history)
    return out
