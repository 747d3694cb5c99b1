"""Search nodes on native boards: the tree's board work in compiled code, python-chess's answers.

A node of a standard game (:func:`chessrl.search.native_board.supported`) keeps its position in the
tree's arrays (``tree.cwords[i]``, ``tree.cmeta[i]``: :mod:`chessrl.search.compiled_board`'s rows):
listing its moves (:func:`list_edges`, one compiled call for all the nodes of a round, as
board_encoding codes in python-chess's order, mapped to action indices in one array lookup),
making a child (:func:`make_child`: the position, its key, its legal moves' count, its end-of-game
value and its input planes' parts in one compiled call; the repetitions counted with the keys
along the tree path, then the root's game: :meth:`ArrayTree.earlier_keys`), and the input planes
(:func:`planes`, from the nodes' bitboards and their ancestors', as
:func:`chessrl.search.board_encoding.encode_boards` computes them from python-chess boards) in one
compiled call. Its python-chess board is made only when something asks for it
(:meth:`ArrayTree.board`). Everything here gives python-chess's answer; the unit tests compare
the two on random games (``rust_chess``, :mod:`chessrl.search.native_board`, the other reference).

>>> from chessrl.search.mcts_tree import ArrayTree
>>> tree = ArrayTree()
>>> root = new_root(tree, chess.Board())
>>> tree.native[root], int(tree.count[root])
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

from chessrl.search import compiled_board as cb
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

__all__ = ["first_mate", "history_keys", "list_edges", "make_child", "make_children", "new_root", "planes"]


def _nan_or(value: float | None) -> float:
    return math.nan if value is None else value


def history_keys(board: chess.Board) -> list[int]:
    """The compiled repetition keys of ``board``'s positions since its last capture or pawn move
    (at most its move stack back), oldest first, its current position last: the positions
    python-chess's ``is_repetition`` looks at. Pass a :func:`~chessrl.search.native_board.supported` board.

    >>> board = chess.Board()
    >>> for uci in ["g1f3", "g8f6", "f3g1", "f6g8"]:
    ...     _ = board.push_uci(uci)
    >>> keys = history_keys(board)
    >>> len(keys), keys[0] == keys[-1]
    (5, True)
    """
    back = min(board.halfmove_clock, len(board.move_stack))
    if back == 0:
        return [int(cb.from_board(board)[0][cb.KEY])]
    start = chess.Board(None)
    board._stack[-back].restore(start)
    words, meta = cb.from_board(start)
    keys = [int(words[cb.KEY])]
    w2, m2 = np.empty_like(words), np.empty_like(meta)
    for move in board.move_stack[-back:]:
        cb.make_move(words, meta, nb.code_of_move(move), w2, m2)
        words, meta, w2, m2 = w2, m2, words, meta
        keys.append(int(words[cb.KEY]))
    return keys


def new_root(tree: ArrayTree, board: chess.Board) -> int | None:
    """Add ``board`` (the tree's own copy) as a native root with its legal moves, or return
    None when the compiled board cannot stand in for python-chess there (the caller falls back).
    Its game's earlier positions (since the last irreversible move) give their keys to ``hist``."""
    if not nb.supported(board):
        return None
    hist = tuple(reversed(history_keys(board)[:-1]))  # the game's earlier positions, newest first
    words, meta = cb.from_board(board)
    out = np.empty(cb.MAX_MOVES, dtype=np.int64)
    codes = out[: cb.legal_codes(words, meta, out)].copy()
    terminal = _nan_or(terminal_value(board, len(codes)))
    i = tree.add_node(board, None, None, terminal, native=True)
    tree.cwords[i] = words
    tree.cmeta[i] = meta
    tree.add_edges(i, None, _ACTION_OF_CODE[int(board.turn)][codes], codes)
    tree.clock[i] = board.halfmove_clock
    tree.stacked[i] = bool(board.move_stack)
    _parts(tree.cwords, tree.cmeta, tree.pieces, tree.consts, i)
    tree.set_hist(i, hist)
    tree.rep[i] = hist[1::2].count(int(words[cb.KEY]))
    return i


def list_edges(tree: ArrayTree, nodes: np.ndarray) -> None:
    """Give native ``nodes`` (distinct, moves not listed yet) their edges: codes and action
    indices written into the tree's edge arrays by compiled code."""
    ids = np.asarray(nodes, dtype=np.int64)
    if len(ids) == 0:
        return
    flat = np.empty(len(ids) * cb.MAX_MOVES, dtype=np.int64)
    counts = np.empty(len(ids), dtype=np.int64)
    total = _list_many(tree.cwords, tree.cmeta, ids, flat, counts)
    if tree.n_edges + total > tree.edge_capacity:
        tree._grow(0, total)
    _write_edges(
        tree.first,
        tree.count,
        tree.ready,
        tree.code,
        tree.action,
        _ACTION_OF_CODE,
        tree.cmeta,
        ids,
        flat,
        counts,
        tree.n_edges,
    )
    tree.n_edges += total


@jit
def _list_many(
    words: np.ndarray, meta: np.ndarray, ids: np.ndarray, flat: np.ndarray, counts: np.ndarray
) -> int:
    """Each node's legal codes, one after another in ``flat``; their counts; the total."""
    total = 0
    for k in range(ids.shape[0]):
        n = cb.legal_codes(words[ids[k]], meta[ids[k]], flat[total:])
        counts[k] = n
        total += n
    return total


@jit
def _write_edges(
    first: np.ndarray,
    count: np.ndarray,
    ready: np.ndarray,
    code: np.ndarray,
    action: np.ndarray,
    action_of_code: np.ndarray,
    meta: np.ndarray,
    ids: np.ndarray,
    flat: np.ndarray,
    counts: np.ndarray,
    start: int,
) -> None:
    """The listed codes as the nodes' edges from edge ``start`` on (:meth:`ArrayTree.add_edges_many`)."""
    e = start
    j = 0
    for k in range(ids.shape[0]):
        node = ids[k]
        white = 1 if meta[node, cb.TURN] == 0 else 0
        first[node] = e
        count[node] = counts[k]
        ready[node] = True
        for _ in range(counts[k]):
            code[e] = flat[j]
            action[e] = action_of_code[white, flat[j]]
            e += 1
            j += 1


def make_child(tree: ArrayTree, node: int, i: int) -> int:
    """The native child of ``node`` after its ``i``-th move, without its moves listed; scored as
    finished or not (a repetition counted along the game); a checkmated child makes ``i`` the
    node's mate. Returns the child (the one there already, if made before)."""
    return int(make_children(tree, np.array([node]), np.array([i]))[0])


def make_children(tree: ArrayTree, nodes: np.ndarray, moves: np.ndarray) -> np.ndarray:
    """:func:`make_child` of ``nodes[k]``'s ``moves[k]``-th move for every k, in one compiled call
    (distinct edges; an edge whose child exists gives that child). Returns the children."""
    nodes = np.asarray(nodes, dtype=np.int64)
    moves = np.asarray(moves, dtype=np.int64)
    new = tree.add_native_nodes(len(nodes))
    t = tree
    return _make_children(
        t.cwords,
        t.cmeta,
        t.pieces,
        t.consts,
        t.parent,
        t.pcode,
        t.clock,
        t.rep,
        t.terminal,
        t.mate,
        t.first,
        t.code,
        t.child,
        t.hfirst,
        t.hcount,
        t.hkeys,
        nodes,
        moves,
        new,
    )


@jit
def _make_children(
    words: np.ndarray,
    meta: np.ndarray,
    pieces: np.ndarray,
    consts: np.ndarray,
    parent: np.ndarray,
    pcode: np.ndarray,
    clock: np.ndarray,
    rep: np.ndarray,
    terminal: np.ndarray,
    mate: np.ndarray,
    first: np.ndarray,
    code: np.ndarray,
    child: np.ndarray,
    hfirst: np.ndarray,
    hcount: np.ndarray,
    hkeys: np.ndarray,
    nodes: np.ndarray,
    moves: np.ndarray,
    new: np.ndarray,
) -> np.ndarray:
    """Row ``new[k]`` becomes node ``nodes[k]`` after its ``moves[k]``-th move: the position and
    its planes' parts, key, clock, repetitions (along ``parent`` links, then the top node's
    ``hkeys``), end value; the edge points to it. Returns the children."""
    out = np.empty(nodes.shape[0], dtype=np.int64)
    for k in range(nodes.shape[0]):
        node = nodes[k]
        e = first[node] + moves[k]
        if child[e] >= 0:
            out[k] = child[e]
            continue
        c = new[k]
        mv = code[e]
        cb.make_move(words[node], meta[node], mv, words[c], meta[c])
        _parts(words, meta, pieces, consts, c)
        n = 1 if cb.has_legal_move(words[c], meta[c]) else 0  # only whether there is one matters here
        value = cb.terminal_value(words[c], meta[c], n, 0)
        key = words[c, cb.KEY]
        clk = meta[c, cb.CLOCK]
        reps = 0
        if clk >= 4:  # the same side to move: 2, 4, ... plies back, at most clk plies back
            plies = clk - 1  # positions before ``node``, newest first: its parent's, ...
            taken = 0
            j = node
            while taken < plies:
                p = parent[j]
                if p < 0:
                    h0 = hfirst[j]
                    for h in range(min(hcount[j], plies - taken)):
                        if taken % 2 == 0 and hkeys[h0 + h] == key:
                            reps += 1
                        taken += 1
                    break
                if taken % 2 == 0 and words[p, cb.KEY] == key:
                    reps += 1
                taken += 1
                j = p
        terminal[c] = 0.0 if reps >= 2 and n > 0 else value
        parent[c] = node
        pcode[c] = mv
        clock[c] = clk
        rep[c] = reps
        child[e] = c
        if terminal[c] < 0:
            mate[node] = moves[k]
        out[k] = c
    return out


def first_mate(tree: ArrayTree, node: int) -> int | None:
    """The first of native ``node``'s moves (edges listed) that checkmates at once, or None."""
    found = _first_mate(tree.cwords[node], tree.cmeta[node], tree.code[tree.edges(node)])
    return None if found < 0 else found


@jit
def _first_mate(words: np.ndarray, meta: np.ndarray, codes: np.ndarray) -> int:
    w2 = np.empty(cb.WORDS, dtype=np.uint64)
    m2 = np.empty(cb.META, dtype=np.int64)
    for i in range(codes.shape[0]):
        cb.make_move(words, meta, codes[i], w2, m2)
        if cb.in_check(w2, m2) and not cb.has_legal_move(w2, m2):
            return i
    return -1


@jit
def _parts(words: np.ndarray, meta: np.ndarray, pieces: np.ndarray, consts: np.ndarray, i: int) -> None:
    """Keep node ``i``'s input-plane parts: its piece bitboards (the side to move's first) and
    the constant planes' values."""
    black = meta[i, cb.TURN]
    for p in range(12):
        pieces[i, p] = words[i, (p + 6 * black) % 12]
    rights = meta[i, cb.CASTLING]
    ours, theirs = (rights >> (2 * black)) & 3, (rights >> (2 - 2 * black)) & 3
    consts[i, 0] = 1.0 - black
    consts[i, 1] = meta[i, cb.FULLMOVE] / MOVE_COUNT_SCALE
    consts[i, 2] = ours & 1
    consts[i, 3] = ours >> 1
    consts[i, 4] = theirs & 1
    consts[i, 5] = theirs >> 1
    consts[i, 6] = meta[i, cb.CLOCK] / NO_PROGRESS_SCALE


def planes(tree: ArrayTree, ids: np.ndarray, history: int) -> np.ndarray:
    """The input planes of nodes ``ids`` (native or not), equal to ``encode_boards`` of their
    python-chess boards: a native node's history steps are its ancestors' bitboards (written by
    one compiled call for all of them); one whose history reaches above its root into the game
    before it, or a python-chess node, is encoded from its python-chess board."""
    n = len(ids)
    out = np.zeros((n, input_channels(history), 8, 8), dtype=np.float32)
    if n == 0:
        return out
    native = tree.nat[ids]
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
