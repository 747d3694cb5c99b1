"""PUCT selection (with virtual loss) and backup of :class:`~chessrl.search.mcts_tree.ArrayTree` walks,
compiled with numba: one call walks many games' trees to their leaves, one call backs them up.

The kernels take the tree's arrays explicitly (never the tree object) and compute exactly what
the NumPy code computes, in the same float operations in the same order: the same edge as
:func:`~chessrl.search.mcts_tree.puct_pick`, the same ``N``, ``W``, ``Q`` and ``visits``, bit for bit, as
:meth:`chessrl.search.mcts.BatchedMCTS._descend` and ``_backup``. The first-play urgency reduction is a
float, NaN for None. What needs Python (listing a node's moves, making a child) stops a walker
with a status for the caller: :func:`descend_tree` and :func:`backup_tree` are such callers.

>>> import chess
>>> from chessrl.search.mcts import BatchedMCTS, MCTSConfig, Node, UniformEvaluator
>>> tree = ArrayTree()
>>> root = tree.add_node(None, [], np.array([3, 5, 7]), math.nan)
>>> tree.set_priors(np.array([root]), np.array([0.25, 0.5, 0.25]), np.array([0.1]))
>>> t = tree
>>> puct_pick_nodes(t.first, t.count, t.N, t.W, t.Q, t.Psel, t.visits, t.value, t.mate,
...                 np.array([root]), 1.5, math.nan).tolist()    # unvisited: the biggest prior
[1]

A round of a batched search: one leaf per game (virtual loss spreads several leaves of a game
over passes, each pass sees the earlier passes' losses), the fresh leaves expanded, then every
pass backed up, in order:

>>> mcts = BatchedMCTS(UniformEvaluator(), MCTSConfig(simulations=8), seed=0)
>>> roots = [Node(chess.Board()), Node(chess.Board("4k3/8/8/8/8/8/4P3/4K3 w - - 0 1"))]
>>> _ = mcts.search(roots, add_noise=False)
>>> ids = np.array([r._id for r in roots])
>>> passes = [descend_tree(mcts.tree, ids, 1.5, None, virtual=True, loss=1.0) for _ in range(2)]
>>> [p.depth.tolist() for p in passes]          # moves walked per game and pass
[[1, 2], [1, 2]]
>>> leaves = np.concatenate([p.leaves for p in passes])
>>> mcts._expand(np.unique(leaves[np.isnan(mcts.tree.value[leaves])]))
>>> for p in passes:
...     backup_tree(mcts.tree, p, virtual=True, loss=1.0)
>>> [r.visits for r in roots]
[10, 10]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from chessrl.search import mcts_native
from chessrl.search.compiled import jit
from chessrl.search.mcts_leaves import ensure_edges, make_child
from chessrl.search.mcts_tree import ArrayTree

__all__ = [
    "LEAF",
    "NEEDS_CHILD",
    "NEEDS_EDGES",
    "NEEDS_ROOM",
    "Paths",
    "backup",
    "backup_tree",
    "descend",
    "descend_gumbel",
    "descend_tree",
    "puct_pick_nodes",
]

#: A walker's status after :func:`descend`: at its leaf (``cur``), a node without listed moves
#: (``cur``: list them, call again), an edge without its child (the last of its path: make it,
#: set ``cur`` to it, call again), a full path (grow the path arrays, call again).
LEAF, NEEDS_EDGES, NEEDS_CHILD, NEEDS_ROOM = 0, 1, 2, 3

_Arr = np.ndarray  # the kernels' arrays: int64, float64 or bool, one-dimensional unless said


@jit
def _pick(
    first: _Arr,
    count: _Arr,
    N: _Arr,
    W: _Arr,
    Q: _Arr,
    Psel: _Arr,
    visits: _Arr,
    value: _Arr,
    mate: _Arr,
    node: int,
    c_puct: float,
    fpu: float,
) -> int:
    """:func:`~chessrl.search.mcts_tree.puct_pick` for one node, in its float operations."""
    f = first[node]
    if mate[node] >= 0:
        return f + mate[node]
    c = count[node]
    v = visits[node]
    sq = math.sqrt(max(v, 1))
    use_fpu = not math.isnan(fpu)
    unvisited_q = 0.0
    if use_fpu:
        if v > 0:
            wsum = 0.0
            if c > 0:
                wsum = W[f]  # left to right, as the reference's cumsum
                for i in range(1, c):
                    wsum += W[f + i]
            mean = wsum / v
        else:
            mean = value[node]
        unvisited_q = mean - fpu
    best = -math.inf
    pick = 0
    for i in range(c):
        e = f + i
        n = N[e]
        q = Q[e]
        if use_fpu and not n > 0:
            q = unvisited_q
        u = (c_puct * Psel[e]) * (sq / (1.0 + n))
        s = q + u
        if math.isnan(s):  # NumPy's argmax takes the first NaN
            return e
        if s > best:
            best = s
            pick = i
    return f + pick


@jit
def puct_pick_nodes(
    first: _Arr,
    count: _Arr,
    N: _Arr,
    W: _Arr,
    Q: _Arr,
    Psel: _Arr,
    visits: _Arr,
    value: _Arr,
    mate: _Arr,
    nodes: _Arr,
    c_puct: float,
    fpu: float,
) -> _Arr:
    """The edge each of ``nodes`` selects: :func:`~chessrl.search.mcts_tree.puct_pick` (``fpu`` NaN:
    no first-play reduction), bit for bit. Returns an int64 array aligned with ``nodes``."""
    out = np.empty(nodes.shape[0], dtype=np.int64)
    for k in range(nodes.shape[0]):
        out[k] = _pick(first, count, N, W, Q, Psel, visits, value, mate, nodes[k], c_puct, fpu)
    return out


@jit
def descend(
    first: _Arr,
    count: _Arr,
    N: _Arr,
    W: _Arr,
    Q: _Arr,
    Psel: _Arr,
    visits: _Arr,
    value: _Arr,
    mate: _Arr,
    child: _Arr,
    walk: _Arr,
    ready: _Arr,
    cur: _Arr,
    path_nodes: _Arr,
    path_edges: _Arr,
    depth: _Arr,
    status: _Arr,
    walkers: _Arr,
    c_puct: float,
    fpu: float,
    virtual: bool,
    loss: float,
) -> None:
    """Walk each walker ``g`` of ``walkers`` from ``cur[g]`` while the node is walkable, picking
    edges as :func:`puct_pick_nodes` (a virtual loss added on each when ``virtual``), recording
    them at ``path_nodes[g, depth[g]]``, ``path_edges[g, depth[g]]`` (``depth[g]`` counts them).
    ``status[g]`` says why it stopped: :data:`LEAF` (``cur[g]`` is the leaf), :data:`NEEDS_EDGES`
    (``cur[g]``'s moves are not listed), :data:`NEEDS_CHILD` (the path's last edge has no child:
    ``cur[g]`` is still its parent), :data:`NEEDS_ROOM` (the path arrays, ``(G, D)``, are full);
    fix that and call again for the walkers stopped (the walk goes on where it stopped). Each
    walker at most once in ``walkers``; their walks must not share edges (one tree per game)."""
    width = path_nodes.shape[1]
    for k in range(walkers.shape[0]):
        g = walkers[k]
        node = cur[g]
        st = LEAF
        while walk[node]:
            if not ready[node]:
                st = NEEDS_EDGES
                break
            d = depth[g]
            if d >= width:
                st = NEEDS_ROOM
                break
            e = _pick(first, count, N, W, Q, Psel, visits, value, mate, node, c_puct, fpu)
            if virtual:
                N[e] += 1
                W[e] -= loss
                Q[e] = W[e] / N[e]
                visits[node] += 1
            path_nodes[g, d] = node
            path_edges[g, d] = e
            depth[g] = d + 1
            c = child[e]
            if c < 0:
                st = NEEDS_CHILD
                break
            node = c
            cur[g] = c
        status[g] = st


_TINY = float(np.finfo(np.float64).tiny)


@jit
def _gumbel_pick(
    first: _Arr,
    count: _Arr,
    N: _Arr,
    N0: _Arr,
    Q: _Arr,
    P: _Arr,
    value: _Arr,
    mate: _Arr,
    score: _Arr,
    node: int,
    at_root: bool,
    considered: int,
    c_visit: float,
    c_scale: float,
) -> int:
    """:func:`chessrl.search.mcts_gumbel.pick` for one node: at a root the considered move
    (``considered`` visits in this search) with the best ``g + logits + sigma(completed Q)``,
    below it the deterministic selection ``pi'(a) - N(a) / (1 + sum N)``; a mate first. The
    same formulas as :mod:`chessrl.search.gumbel` (its sums in order, not NumPy's pairwise: the
    scores may differ in the last bit, the choices only at such a near-tie)."""
    f = first[node]
    if mate[node] >= 0:
        return f + mate[node]
    c = count[node]
    total = 0
    psum = 0.0
    for i in range(c):
        n = N[f + i]
        total += n
        if n > 0:
            psum += max(P[f + i], _TINY)
    weighted = 0.0
    for i in range(c):
        if N[f + i] > 0:
            weighted += max(P[f + i], _TINY) * Q[f + i] / max(psum, _TINY)
    mixed = (value[node] + total * weighted) / (total + 1.0)
    lo, hi, maxvisit = math.inf, -math.inf, 0
    for i in range(c):
        cq = Q[f + i] if N[f + i] > 0 else mixed
        lo = min(lo, cq)
        hi = max(hi, cq)
        maxvisit = max(maxvisit, N[f + i])
    scale = (c_visit + maxvisit) * c_scale
    span = max(hi - lo, 1e-8)
    best = -math.inf
    pick = 0
    if at_root:
        for i in range(c):
            e = f + i
            if N[e] - N0[e] != considered:
                continue
            cq = Q[e] if N[e] > 0 else mixed
            s = max(-1e9, score[e] + scale * ((cq - lo) / span))
            if s > best:
                best = s
                pick = i
        return f + pick
    top = -math.inf
    for i in range(c):
        cq = Q[f + i] if N[f + i] > 0 else mixed
        top = max(top, math.log(max(P[f + i], _TINY)) + scale * ((cq - lo) / span))
    esum = 0.0
    for i in range(c):
        cq = Q[f + i] if N[f + i] > 0 else mixed
        esum += math.exp(math.log(max(P[f + i], _TINY)) + scale * ((cq - lo) / span) - top)
    for i in range(c):
        e = f + i
        cq = Q[e] if N[e] > 0 else mixed
        pi = math.exp(math.log(max(P[e], _TINY)) + scale * ((cq - lo) / span) - top) / esum
        s = pi - N[e] / (1.0 + total)
        if s > best:
            best = s
            pick = i
    return f + pick


@jit
def descend_gumbel(
    first: _Arr,
    count: _Arr,
    N: _Arr,
    N0: _Arr,
    W: _Arr,
    Q: _Arr,
    P: _Arr,
    visits: _Arr,
    value: _Arr,
    mate: _Arr,
    score: _Arr,
    child: _Arr,
    walk: _Arr,
    ready: _Arr,
    cur: _Arr,
    path_nodes: _Arr,
    path_edges: _Arr,
    depth: _Arr,
    status: _Arr,
    walkers: _Arr,
    schedule: _Arr,
    schedule_len: _Arr,
    c_visit: float,
    c_scale: float,
    virtual: bool,
    loss: float,
) -> None:
    """:func:`descend` with Gumbel's selection (:func:`_gumbel_pick`): each walker starts at its
    search root (depth 0), whose sequential-halving schedule is row ``g`` of ``schedule``
    (``schedule_len[g]`` long); the same statuses, the same resumption."""
    width = path_nodes.shape[1]
    for k in range(walkers.shape[0]):
        g = walkers[k]
        node = cur[g]
        st = LEAF
        while walk[node]:
            if not ready[node]:
                st = NEEDS_EDGES
                break
            d = depth[g]
            if d >= width:
                st = NEEDS_ROOM
                break
            considered = 0
            if d == 0 and schedule_len[g] > 0:
                done = 0
                for e in range(first[node], first[node] + count[node]):
                    done += N[e] - N0[e]
                considered = schedule[g, min(done, schedule_len[g] - 1)]
            e = _gumbel_pick(
                first, count, N, N0, Q, P, value, mate, score, node, d == 0, considered, c_visit, c_scale
            )
            if virtual:
                N[e] += 1
                W[e] -= loss
                Q[e] = W[e] / N[e]
                visits[node] += 1
            path_nodes[g, d] = node
            path_edges[g, d] = e
            depth[g] = d + 1
            c = child[e]
            if c < 0:
                st = NEEDS_CHILD
                break
            node = c
            cur[g] = c
        status[g] = st


@jit
def backup(
    N: _Arr,
    W: _Arr,
    Q: _Arr,
    visits: _Arr,
    value: _Arr,
    terminal: _Arr,
    leaves: _Arr,
    path_nodes: _Arr,
    path_edges: _Arr,
    depth: _Arr,
    walkers: _Arr,
    virtual: bool,
    loss: float,
) -> None:
    """Back each walker's leaf value (``terminal`` if finished, else ``value``, for the side to
    move at ``leaves[g]``) up its path, flipping sides each ply, and take its virtual losses
    back (``virtual``): :meth:`chessrl.search.mcts.BatchedMCTS._backup`, bit for bit."""
    for k in range(walkers.shape[0]):
        g = walkers[k]
        leaf = leaves[g]
        v = terminal[leaf]
        if math.isnan(v):
            v = value[leaf]
        length = depth[g]
        for d in range(length):
            e = path_edges[g, d]
            node = path_nodes[g, d]
            signed = -v if (length - d) % 2 == 1 else v
            if virtual:
                N[e] -= 1
                W[e] += loss
                visits[node] -= 1
            N[e] += 1
            W[e] += signed
            Q[e] = W[e] / N[e]
            visits[node] += 1


@dataclass
class Paths:
    """The walks of one pass, one row per walker: the leaf each reached, its path's nodes and
    edges (``(G, D)``, the first ``depth[g]`` of row ``g`` used)."""

    leaves: np.ndarray
    nodes: np.ndarray
    edges: np.ndarray
    depth: np.ndarray


def descend_tree(
    tree: ArrayTree,
    roots: np.ndarray,
    c_puct: float,
    fpu_reduction: float | None,
    virtual: bool,
    loss: float,
    width: int = 32,
    gumbel: tuple[dict[int, tuple[int, ...]], float, float] | None = None,
) -> Paths:
    """One walk from each of ``roots`` to a leaf (:func:`descend`), the moves of nodes walked
    through listed and children made on the way (``mcts_leaves``' ``ensure_edges`` and
    ``make_child``): ``BatchedMCTS._descend``'s walks. ``width``: the paths' first length.
    ``gumbel``: Gumbel's selection instead of PUCT (:func:`descend_gumbel`), with the roots'
    halving schedules, ``c_visit`` and ``c_scale``."""
    g = len(roots)
    cur = np.array(roots, dtype=np.int64)
    depth = np.zeros(g, dtype=np.int64)
    status = np.zeros(g, dtype=np.int64)
    nodes = np.empty((g, width), dtype=np.int64)
    edges = np.empty((g, width), dtype=np.int64)
    walkers = np.arange(g, dtype=np.int64)
    fpu = math.nan if fpu_reduction is None else float(fpu_reduction)
    c_puct, loss, virtual = float(c_puct), float(loss), bool(virtual)
    walk = _Walk(cur, nodes, edges, depth, status, c_puct, fpu, virtual, loss)
    if gumbel is not None:
        walk.gumbel = _gumbel_schedules(cur, gumbel)
    while len(walkers):
        _walk_pass(tree, walk, walkers)
        st = status[walkers]
        stopped = st != LEAF
        if not stopped.any():
            break
        walkers, st = walkers[stopped], st[stopped]
        listing = st == NEEDS_EDGES
        if listing.any():
            ensure_edges(tree, cur[walkers[listing]])
        if (st == NEEDS_ROOM).any():
            more = np.empty((g, walk.nodes.shape[1]), dtype=np.int64)
            walk.nodes = np.concatenate((walk.nodes, more), axis=1)
            walk.edges = np.concatenate((walk.edges, more), axis=1)
        making = st == NEEDS_CHILD
        if making.any():
            making[making] = _make_children(tree, walk, walkers[making])
            walkers = walkers[~(st == NEEDS_CHILD) | making]
    return Paths(cur, walk.nodes, walk.edges, depth)


@dataclass
class _Walk:
    """:func:`descend_tree`'s walkers: where each is (``cur``), its path so far (``nodes``,
    ``edges``, ``depth``), why it stopped (``status``), and the selection's settings (PUCT's, or
    Gumbel's: ``schedule``, ``schedule_len``, ``c_visit``, ``c_scale``)."""

    cur: np.ndarray
    nodes: np.ndarray
    edges: np.ndarray
    depth: np.ndarray
    status: np.ndarray
    c_puct: float
    fpu: float
    virtual: bool
    loss: float
    gumbel: tuple[np.ndarray, np.ndarray, float, float] | None = None


def _gumbel_schedules(
    cur: np.ndarray, gumbel: tuple[dict[int, tuple[int, ...]], float, float]
) -> tuple[np.ndarray, np.ndarray, float, float]:
    """The roots' (``cur``) halving schedules as one zero-padded array and their lengths, with
    ``c_visit`` and ``c_scale``: :func:`descend_gumbel`'s arguments."""
    g = len(cur)
    seqs = [gumbel[0].get(r, ()) for r in cur.tolist()]
    schedule_len = np.array([len(q) for q in seqs], dtype=np.int64)
    schedule = np.zeros((g, max(1, int(schedule_len.max(initial=0)))), dtype=np.int64)
    for row, q in enumerate(seqs):
        schedule[row, : len(q)] = q
    return schedule, schedule_len, float(gumbel[1]), float(gumbel[2])


def _walk_pass(tree: ArrayTree, walk: _Walk, walkers: np.ndarray) -> None:
    """One compiled call walking ``walkers`` on as far as they go (:func:`descend`, or
    :func:`descend_gumbel`)."""
    t = tree  # growing replaces the arrays: read them at each call
    w = walk
    if w.gumbel is None:
        descend(
            t.first,
            t.count,
            t.N,
            t.W,
            t.Q,
            t.Psel,
            t.visits,
            t.value,
            t.mate,
            t.child,
            t.walk,
            t.ready,
            w.cur,
            w.nodes,
            w.edges,
            w.depth,
            w.status,
            walkers,
            w.c_puct,
            w.fpu,
            w.virtual,
            w.loss,
        )
    else:
        schedule, schedule_len, c_visit, c_scale = w.gumbel
        descend_gumbel(
            t.first,
            t.count,
            t.N,
            t.N0,
            t.W,
            t.Q,
            t.P,
            t.visits,
            t.value,
            t.mate,
            t.score,
            t.child,
            t.walk,
            t.ready,
            w.cur,
            w.nodes,
            w.edges,
            w.depth,
            w.status,
            walkers,
            schedule,
            schedule_len,
            c_visit,
            c_scale,
            w.virtual,
            w.loss,
        )


def _make_children(tree: ArrayTree, walk: _Walk, made: np.ndarray) -> np.ndarray:
    """Make the child at the end of each of ``made``'s paths (native games' in one compiled call),
    move those walkers onto it; returns, per walker, whether its new child is walkable."""
    cur, nodes, edges, depth = walk.cur, walk.nodes, walk.edges, walk.depth
    parents = nodes[made, depth[made] - 1]
    moves = edges[made, depth[made] - 1] - tree.first[parents]
    native = tree.nat[parents]
    if native.all():  # one compiled call for the native games' children
        cur[made] = mcts_native.make_children(tree, parents, moves)
    else:
        if native.any():
            cur[made[native]] = mcts_native.make_children(tree, parents[native], moves[native])
        for w, parent, i in zip(
            made[~native].tolist(), parents[~native].tolist(), moves[~native].tolist(), strict=True
        ):
            cur[w] = make_child(tree, parent, i)
    return tree.walk[cur[made]]  # a new child is a leaf unless walkable


def backup_tree(tree: ArrayTree, paths: Paths, virtual: bool, loss: float) -> None:
    """Back up the walks of one pass (:func:`backup`): ``BatchedMCTS._backup``."""
    t = tree
    walkers = np.arange(len(paths.leaves), dtype=np.int64)
    backup(
        t.N,
        t.W,
        t.Q,
        t.visits,
        t.value,
        t.terminal,
        paths.leaves,
        paths.nodes,
        paths.edges,
        paths.depth,
        walkers,
        bool(virtual),
        float(loss),
    )
