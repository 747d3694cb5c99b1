"""The search trees of a batch of games in flat, preallocated NumPy arrays.

One :class:`ArrayTree` holds the nodes of many games' trees. A node is a row of the node arrays
(its evaluator value, exact terminal value, visit count, a move known to mate, its edge range);
its legal moves are a contiguous range of rows of the edge arrays (prior ``P``, the prior used for
selection ``Psel`` (the root's noisy one), visits ``N``, total value ``W``, mean value ``Q``, the
child node or -1, the action index). Selection and backup run on these arrays for all games at
once (:func:`puct_pick` picks one edge for each of many nodes in a few array operations); only
making a child (python-chess's board, move generation) stays per node in Python.

>>> tree = ArrayTree()
>>> root = tree.add_node(None, [], np.array([3, 5, 7]), float("nan"))
>>> tree.set_priors(np.array([root]), np.array([0.5, 0.25, 0.25]), np.array([0.1]))
>>> int(puct_pick(tree, np.array([root]), c_puct=1.5, fpu_reduction=None)[0])   # unvisited: the biggest prior
0

Arrays grow (doubling) when full; :meth:`ArrayTree.compact` keeps only the subtrees of given
nodes and renumbers them.
"""

from __future__ import annotations

import math
import weakref
from typing import Any

import numpy as np

from chessrl.search.board_encoding import _MOVE_OF_CODE, copy_board

__all__ = ["ArrayTree", "edge_ranges", "padded_edges", "puct_pick", "puct_pick_one"]

_NODE_FIELDS = {
    "first": (np.int64, 0),  # first edge
    "count": (np.int64, 0),  # number of edges (legal moves)
    "value": (np.float64, np.nan),  # the evaluator's value for the side to move; NaN: not expanded
    "terminal": (np.float64, np.nan),  # exact value of a finished game; NaN: not finished
    "visits": (np.int64, 0),  # N summed over the node's edges
    "mate": (np.int64, -1),  # a move (local index) known to mate at once, else -1
    "noisy": (np.bool_, False),  # Psel holds noisy priors (a root's)
    "chosen": (np.int64, -1),  # the move (local index) a Gumbel search chose, else -1
    "ready": (np.bool_, False),  # the legal moves and edges exist
    "walk": (np.bool_, False),  # expanded and not finished: a search walks on through it
    "lrow": (np.int64, -1),  # the row of ``logits`` an evaluated node without listed moves keeps
    "parent": (np.int64, -1),  # a native node's parent (-1: a root, whose board is kept)
    "pcode": (np.int64, -1),  # the code of the move from the parent (board_encoding's codes)
    "clock": (np.int64, 0),  # a native node's half-move clock
    "rep": (np.int64, 0),  # earlier occurrences of a native node's position in its game
    "stacked": (np.bool_, False),  # a native root whose game goes back before it (planes need it)
    # a native node's input planes' parts: its 12 piece bitboards (ours, then theirs) and the
    # 7 constant planes' values (colour, move number / 100, castling ours K Q theirs K Q, clock / 100)
    "pieces": (np.uint64, 0, 12),
    # a native node's position: chessrl.search.compiled_board's words (12 bitboards, key) and meta
    "cwords": (np.uint64, 0, 13),
    "cmeta": (np.int64, 0, 5),
    # a native root's earlier keys (``hist``) as a range of ``hkeys``, for the compiled kernels
    "hfirst": (np.int64, -1),
    "hcount": (np.int64, 0),
    "nat": (np.bool_, False),  # a native node (``native[i]`` True), for array code
    "consts": (np.float32, 0.0, 7),
}
_EDGE_FIELDS = {
    "P": (np.float64, 0.0),
    "Psel": (np.float64, 0.0),
    "N": (np.int64, 0),
    "W": (np.float64, 0.0),
    "Q": (np.float64, 0.0),
    "child": (np.int64, -1),
    "action": (np.int64, 0),
    "N0": (np.int64, 0),  # N at the start of the current search (a root's, for Gumbel)
    "score": (np.float64, 0.0),  # a Gumbel root's g + logits
    "code": (np.int64, -1),  # a native node's move, as a board_encoding code
}


class ArrayTree:
    """Nodes and edges of many search trees in flat arrays; see the module docstring.

    Python-side per node: ``boards[i]`` (python-chess) and ``moves[i]`` (its legal moves, in
    python-chess's order, aligned with the edge range). ``handles`` maps node ids to the live
    :class:`chessrl.search.mcts.Node` objects that view them (weakly).

    A *native* node (:mod:`chessrl.search.mcts_native`, ``native[i]`` True) keeps its position in
    the rows ``cwords[i]``, ``cmeta[i]`` (:mod:`chessrl.search.compiled_board`) instead: its moves are the edges' ``code`` (in python-chess's order all the same), its
    python-chess board and move list are made only when asked (:meth:`board`, :meth:`move_list`,
    replaying the moves from the nearest node that has one), and its repetitions are counted
    with their keys (``cwords[i, 12]``) along ``parent`` links, then a root's ``hist[i]`` (the keys
    of its game's earlier positions, newest first; also kept in ``hkeys`` for compiled code, see
    :meth:`set_hist`). A native root always has its python-chess board.
    """

    def __init__(self, node_capacity: int = 16, edge_capacity: int = 512) -> None:
        self.node_capacity = max(node_capacity, 1)
        self.edge_capacity = max(edge_capacity, 1)
        for name, (dtype, fill, *width) in _NODE_FIELDS.items():
            setattr(self, name, np.full((self.node_capacity, *width), fill, dtype=dtype))
        for name, (dtype, fill) in _EDGE_FIELDS.items():
            setattr(self, name, np.full(self.edge_capacity, fill, dtype=dtype))
        self.n_nodes = 0
        self.n_edges = 0
        self.boards: list[Any] = []
        self.moves: list[list[Any] | None] = []
        self.native: list[Any] = []
        self.hist: dict[int, tuple[int, ...]] = {}
        self.hkeys = np.zeros(64, dtype=np.uint64)
        self.n_hkeys = 0
        #: The network logits of nodes evaluated before their moves were listed (``lrow``), one
        #: row each, in one buffer that doubles when full and is reused by compaction (a taken
        #: row stays until then): no batch array stays referenced by the few leaves it left
        #: unwalked (per-round arrays kept alive that way fragmented the heap: 64 games held
        #: ~300 MB more than they used).
        self.logits = np.zeros((0, 0), dtype=np.float32)
        self.n_rows = 0
        self.handles: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()

    # --- storage -----------------------------------------------------------------------------

    def _grow(self, nodes: int, edges: int) -> None:
        if self.n_nodes + nodes > self.node_capacity:
            cap = max(2 * self.node_capacity, self.n_nodes + nodes)
            for name, (dtype, fill, *width) in _NODE_FIELDS.items():
                new = np.full((cap, *width), fill, dtype=dtype)
                new[: self.n_nodes] = getattr(self, name)[: self.n_nodes]
                setattr(self, name, new)
            self.node_capacity = cap
        if self.n_edges + edges > self.edge_capacity:
            cap = max(2 * self.edge_capacity, self.n_edges + edges)
            for name, (dtype, fill) in _EDGE_FIELDS.items():
                new = np.full(cap, fill, dtype=dtype)
                new[: self.n_edges] = getattr(self, name)[: self.n_edges]
                setattr(self, name, new)
            self.edge_capacity = cap

    def add_node(
        self,
        board: Any,
        moves: list[Any] | None,
        actions: np.ndarray | None,
        terminal: float,
        native: Any = None,
    ) -> int:
        """A new node (not expanded) with one edge per legal move (none yet when ``moves`` is
        None: :meth:`add_edges` later); returns its id. ``native``: True for a native node (the
        caller sets its position, ``parent``, ``pcode``, ``clock``, ``rep``)."""
        n = 0 if actions is None else len(actions)
        if self.n_nodes + 1 > self.node_capacity or self.n_edges + n > self.edge_capacity:
            self._grow(1, n)
        i = self.n_nodes
        self.terminal[i] = terminal
        self.n_nodes = i + 1
        self.boards.append(board)
        self.moves.append(None)
        self.native.append(native)
        self.nat[i] = native is not None
        if moves is not None:
            self.add_edges(i, moves, actions)  # type: ignore[arg-type]
        return i

    def add_native_nodes(self, k: int) -> np.ndarray:
        """``k`` new native nodes, their rows at their defaults (the caller fills them); their ids."""
        if self.n_nodes + k > self.node_capacity:
            self._grow(k, 0)
        ids = np.arange(self.n_nodes, self.n_nodes + k, dtype=np.int64)
        self.n_nodes += k
        self.boards += [None] * k
        self.moves += [None] * k
        self.native += [True] * k
        self.nat[ids] = True
        return ids

    def set_hist(self, node: int, keys: tuple[int, ...]) -> None:
        """Keep ``keys`` (newest first) as the earlier positions' keys of the game above the root
        ``node``: in ``hist`` and, for compiled code, as ``hkeys[hfirst[node] : + hcount[node]]``."""
        self.hist[node] = keys
        n = len(keys)
        if self.n_hkeys + n > len(self.hkeys):
            grown = np.zeros(max(2 * len(self.hkeys), self.n_hkeys + n), dtype=np.uint64)
            grown[: self.n_hkeys] = self.hkeys[: self.n_hkeys]
            self.hkeys = grown
        self.hkeys[self.n_hkeys : self.n_hkeys + n] = np.array(keys, dtype=np.uint64)
        self.hfirst[node] = self.n_hkeys
        self.hcount[node] = n
        self.n_hkeys += n

    def add_edges(self, node: int, moves: list[Any] | None, actions: np.ndarray, codes: Any = None) -> None:
        """Give ``node`` its legal moves: one new edge each (a native node: ``moves`` None and
        their ``codes``)."""
        n = len(actions)
        if self.n_edges + n > self.edge_capacity:
            self._grow(0, n)
        e = self.n_edges
        self.first[node] = e
        self.count[node] = n
        if n:
            self.action[e : e + n] = actions
            if codes is not None:
                self.code[e : e + n] = codes
        self.n_edges = e + n
        self.moves[node] = moves
        self.ready[node] = True

    def add_edges_many(
        self,
        nodes: list[int],
        moves: list[list[Any]] | None,
        actions: list[np.ndarray],
        codes: list[Any] | None = None,
    ) -> None:
        """:meth:`add_edges` for many nodes at once (native nodes: ``moves`` None, ``codes``)."""
        counts = np.array([len(a) for a in actions], dtype=np.int64)
        total = int(counts.sum())
        if self.n_edges + total > self.edge_capacity:
            self._grow(0, total)
        ids = np.array(nodes, dtype=np.int64)
        self.first[ids] = self.n_edges + np.cumsum(counts) - counts
        self.count[ids] = counts
        self.ready[ids] = True
        if total:
            self.action[self.n_edges : self.n_edges + total] = np.concatenate(actions)
            if codes is not None:
                self.code[self.n_edges : self.n_edges + total] = np.concatenate(codes)
        self.n_edges += total
        if moves is not None:
            for i, m in zip(nodes, moves, strict=True):
                self.moves[i] = m

    # --- native nodes ---------------------------------------------------------------------------

    def move_list(self, node: int) -> list[Any]:
        """``node``'s legal moves as python-chess moves, aligned with its edges (a native node's
        are made from its codes on first use)."""
        moves = self.moves[node]
        if moves is None:
            table = _MOVE_OF_CODE
            moves = [table[c] for c in self.code[self.edges(node)].tolist()]
            self.moves[node] = moves
        return moves

    def board(self, node: int) -> Any:
        """``node``'s python-chess board, with its game's moves (a native node's is replayed from
        its nearest ancestor that has one, and kept)."""
        board = self.boards[node]
        if board is not None:
            return board
        codes = []
        top = node
        while self.boards[top] is None:
            codes.append(int(self.pcode[top]))
            top = int(self.parent[top])
            assert top >= 0, "a native root keeps its python-chess board"
        board = copy_board(self.boards[top])
        table = _MOVE_OF_CODE
        for c in reversed(codes):
            board.push(table[c])
        self.boards[node] = board
        return board

    def earlier_keys(self, node: int, plies: int) -> list[int]:
        """The repetition keys of the (up to) ``plies`` positions of ``node``'s game before it,
        newest first: its ancestors', then the top one's ``hist``."""
        keys: list[int] = []
        i = node
        while len(keys) < plies:
            parent = int(self.parent[i])
            if parent < 0:
                keys += self.hist.get(i, ())[: plies - len(keys)]
                break
            keys.append(int(self.cwords[parent, 12]))
            i = parent
        return keys

    def detach(self, node: int) -> None:
        """Make a native ``node`` a root: its board and its game's earlier keys kept on it, so
        that its ancestors may go."""
        if self.parent[node] < 0:
            return
        self.board(node)
        self.set_hist(node, tuple(self.earlier_keys(node, int(self.clock[node]))))
        self.parent[node] = -1
        self.stacked[node] = True

    def keep_logits(self, nodes: np.ndarray, logits: np.ndarray) -> None:
        """Keep ``logits[k]`` (a row of network logits) for ``nodes[k]`` until its moves are
        listed (:meth:`take_logits`). The buffer takes the widest dtype it was given (float32
        from the network; float64 logits are kept as float64)."""
        k = len(nodes)
        if k == 0:
            return
        self._check_width(logits.shape[1])
        dtype = np.result_type(logits.dtype, np.float32, *([self.logits.dtype] if self.n_rows else []))
        fits = self.n_rows + k <= len(self.logits) and self.logits.shape[1] == logits.shape[1]
        if not fits or dtype != self.logits.dtype:
            grown = np.empty((max(2 * len(self.logits), self.n_rows + k, 64), logits.shape[1]), dtype=dtype)
            if self.n_rows:
                grown[: self.n_rows] = self.logits[: self.n_rows]
            self.logits = grown
        self.logits[self.n_rows : self.n_rows + k] = logits
        self.lrow[nodes] = np.arange(self.n_rows, self.n_rows + k)
        self.n_rows += k

    def _check_width(self, width: int) -> None:
        if self.n_rows and self.logits.shape[1] != width:
            raise ValueError(f"logits of width {width} for a tree keeping {self.logits.shape[1]}")

    def take_logits(self, node: int) -> np.ndarray | None:
        """The logits kept for ``node``, forgotten by the node; None if none. A view into the
        buffer, which the next compaction overwrites: use it at once."""
        row = int(self.lrow[node])
        if row < 0:
            return None
        self.lrow[node] = -1
        return self.logits[row]

    def edges(self, node: int) -> slice:
        f = int(self.first[node])
        return slice(f, f + int(self.count[node]))

    def set_priors(
        self, nodes: np.ndarray, flat_priors: np.ndarray, values: np.ndarray, idx: np.ndarray | None = None
    ) -> None:
        """Expand ``nodes``: their priors, concatenated in the order of ``nodes`` (each node's
        aligned with its moves), and their values. ``idx``: their edges' rows, when known."""
        if len(nodes) == 0:
            return
        if idx is None:
            idx, _ = edge_ranges(self.first[nodes], self.count[nodes])
        self.P[idx] = flat_priors
        self.Psel[idx] = flat_priors
        self.noisy[nodes] = False
        self.value[nodes] = values
        self.walk[nodes] = np.isnan(self.terminal[nodes])

    # --- moving subtrees ----------------------------------------------------------------------

    def subtree(self, roots: np.ndarray) -> np.ndarray:
        """The ids of every node below (and including) ``roots``, each once, parents first."""
        seen = np.zeros(self.n_nodes, dtype=bool)
        frontier = np.unique(np.asarray(roots, dtype=np.int64))
        order = []
        while len(frontier):
            frontier = frontier[~seen[frontier]]
            seen[frontier] = True
            order.append(frontier)
            idx, _ = edge_ranges(self.first[frontier], self.count[frontier])
            children = self.child[idx]
            frontier = np.unique(children[children >= 0])
        return np.concatenate(order) if order else np.zeros(0, dtype=np.int64)

    def copy_from(self, other: ArrayTree, nodes: np.ndarray) -> np.ndarray:
        """Append ``other``'s ``nodes`` (a set closed under children, as :meth:`subtree` gives)
        to this tree; returns their new ids (aligned with ``nodes``). ``other`` may be ``self``."""
        nodes = np.asarray(nodes, dtype=np.int64)
        k = len(nodes)
        counts = other.count[nodes]
        old_idx, _ = edge_ranges(other.first[nodes], counts)
        node_list = nodes.tolist()
        inside = np.zeros(other.n_nodes, dtype=bool)
        inside[nodes] = True
        parents = other.parent[nodes]
        for top in np.flatnonzero((parents >= 0) & ~inside[np.maximum(parents, 0)]).tolist():
            other.detach(node_list[top])  # its ancestors stay behind: keep its board and keys
        node_vals = {name: getattr(other, name)[nodes].copy() for name in _NODE_FIELDS}
        edge_vals = {name: getattr(other, name)[old_idx].copy() for name in _EDGE_FIELDS}
        parents = node_vals["parent"]
        boards = [other.boards[i] for i in node_list]
        moves = [other.moves[i] for i in node_list]
        natives = [other.native[i] for i in node_list]
        hist = {row: other.hist[i] for row, i in enumerate(node_list) if i in other.hist}
        lrows = node_vals["lrow"]
        kept = np.flatnonzero(lrows >= 0)
        if len(kept):
            self._check_width(other.logits.shape[1])  # before anything is appended
        kept_logits = other.logits[lrows[kept]]  # a copy, taken before this tree's rows move
        self._grow(k, len(old_idx))
        remap = np.full(other.n_nodes, -1, dtype=np.int64)
        new_ids = np.arange(self.n_nodes, self.n_nodes + k, dtype=np.int64)
        remap[nodes] = new_ids
        firsts = self.n_edges + np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
        node_vals["first"] = firsts
        child = edge_vals["child"]
        edge_vals["child"] = np.where(child >= 0, remap[np.maximum(child, 0)], -1)
        node_vals["parent"] = np.where(parents >= 0, remap[np.maximum(parents, 0)], -1)
        for name, vals in node_vals.items():
            getattr(self, name)[self.n_nodes : self.n_nodes + k] = vals
        for name, vals in edge_vals.items():
            getattr(self, name)[self.n_edges : self.n_edges + len(old_idx)] = vals
        self.n_nodes += k
        self.n_edges += len(old_idx)
        self.boards += boards
        self.moves += moves
        self.native += natives
        self.hfirst[new_ids] = -1
        self.hcount[new_ids] = 0
        for row, h in hist.items():
            self.set_hist(int(new_ids[row]), h)
        self.lrow[new_ids] = -1
        self.keep_logits(new_ids[kept], kept_logits)
        return new_ids

    def compact(self, keep: np.ndarray | None = None) -> np.ndarray:
        """Keep only the subtrees of ``keep`` and of every live handle, renumbered from 0
        (parents first); returns the old-id -> new-id map (-1 for a dropped node)."""
        handles = dict(self.handles.items())
        roots = np.array(list(handles), dtype=np.int64)
        if keep is not None:
            roots = np.concatenate((roots, np.asarray(keep, dtype=np.int64)))
        nodes = self.subtree(roots)
        fresh = ArrayTree(max(2 * len(nodes), 16), max(2 * int(self.count[nodes].sum()), 512))
        fresh.logits = self.logits  # the kept rows move to its front: no new buffer to fault in
        new_ids = fresh.copy_from(self, nodes)
        remap = np.full(max(self.n_nodes, 1), -1, dtype=np.int64)
        remap[nodes] = new_ids
        self.__dict__.update({k: v for k, v in fresh.__dict__.items() if k != "handles"})
        self.handles = weakref.WeakValueDictionary()
        for old, handle in handles.items():
            new = int(remap[old])
            self.handles[new] = handle
            handle._id = new
        return remap


def edge_ranges(firsts: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The concatenated ranges ``firsts[i] .. firsts[i] + counts[i]`` and each element's row."""
    total = int(counts.sum())
    rows = np.repeat(np.arange(len(counts)), counts)
    if total == 0:
        return np.zeros(0, dtype=np.int64), rows
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    idx = np.arange(total, dtype=np.int64) - np.repeat(starts - firsts, counts)
    return idx, rows


_COLS = np.arange(256)  # more than the most legal moves of any position (218)


def padded_edges(
    tree: ArrayTree, nodes: np.ndarray, first: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The edge ids of ``nodes`` as a ``(len(nodes), max moves)`` matrix and its validity mask
    (the padding holds other edges: mask it). ``first`` is ``tree.first[nodes]`` if known."""
    if first is None:
        first = tree.first[nodes]
    count = tree.count[nodes]
    width = max(int(count.max()) if len(count) else 0, 1)
    cols = _COLS[:width] if width <= len(_COLS) else np.arange(width)
    valid = cols < count[:, None]
    idx = np.minimum(first[:, None] + cols, max(tree.n_edges - 1, 0))  # padding: any edge, masked
    return idx, valid


def puct_pick(tree: ArrayTree, nodes: np.ndarray, c_puct: float, fpu_reduction: float | None) -> np.ndarray:
    """For each of ``nodes`` (expanded, not finished): the edge with the highest
    ``Q + c_puct * P * sqrt(max(visits, 1)) / (1 + N)`` (unvisited ``Q``: 0, or the node's mean
    value so far minus ``fpu_reduction``), the first on ties; a move known to mate wins."""
    first = tree.first[nodes]
    idx, valid = padded_edges(tree, nodes, first)
    n = tree.N[idx]
    visits = tree.visits[nodes]
    q = tree.Q[idx]
    if fpu_reduction is not None:
        # summed left to right (cumsum), not pairwise: the same sum whatever the batch's width
        wsum = np.where(valid, tree.W[idx], 0.0).cumsum(axis=1)[:, -1]
        mean = np.where(visits > 0, wsum / np.maximum(visits, 1), tree.value[nodes])
        q = np.where(n > 0, q, (mean - fpu_reduction)[:, None])
    sq = np.sqrt(np.maximum(visits, 1))
    u = (c_puct * tree.Psel[idx]) * (sq[:, None] / (1.0 + n))
    pick = np.where(valid, q + u, -math.inf).argmax(axis=1)
    mate = tree.mate[nodes]
    return first + np.where(mate >= 0, mate, pick)


def puct_pick_one(tree: ArrayTree, node: int, c_puct: float, fpu_reduction: float | None) -> int:
    """:func:`puct_pick` for one node, on its edge slice (a search of one game alone): the same
    edge, computed the same way."""
    f = int(tree.first[node])
    mate = int(tree.mate[node])
    if mate >= 0:
        return f + mate
    edges = slice(f, f + int(tree.count[node]))
    n = tree.N[edges]
    visits = int(tree.visits[node])
    q = tree.Q[edges]
    if fpu_reduction is not None:
        mean = float(tree.W[edges].cumsum()[-1]) / visits if visits > 0 else float(tree.value[node])
        q = np.where(n > 0, q, mean - fpu_reduction)
    u = (c_puct * tree.Psel[edges]) * (math.sqrt(max(visits, 1)) / (1.0 + n))
    return f + int((q + u).argmax())
