"""The compiled PUCT selection and backup (:mod:`chessrl.search.mcts_compiled`) against the NumPy code they
replace, bit for bit: the same edges as ``puct_pick`` on real trees with random statistics and on
ties built to within one rounding, and the same ``N``, ``W``, ``Q``, ``visits`` as
``BatchedMCTS._descend`` and ``_backup`` over rounds of one or several passes per game."""

from __future__ import annotations

import doctest
import math
import zlib
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

import chess
import numpy as np
import pytest

import chessrl.search.mcts_compiled as mc
from chessrl.search import mcts_leaves
from chessrl.search.board_encoding import NUM_ACTIONS
from chessrl.search.mcts import BatchedMCTS, MCTSConfig, Node
from chessrl.search.mcts_compiled import (
    LEAF,
    NEEDS_CHILD,
    NEEDS_EDGES,
    NEEDS_ROOM,
    backup,
    backup_tree,
    descend,
    descend_tree,
    puct_pick_nodes,
)
from chessrl.search.mcts_leaves import ensure_edges, make_child
from chessrl.search.mcts_tree import ArrayTree, puct_pick, puct_pick_one

FENS = [
    chess.STARTING_FEN,
    "r1bqkb1r/pppp1ppp/2n2n2/4p3/2B1P3/5N2/PPPP1PPP/RNBQK2R w KQkq - 4 4",
    "8/8/4k3/8/2K5/8/4P3/8 w - - 0 1",
    "6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1",  # Rd8 mates: a terminal leaf every walk
    "6k1/5ppp/8/8/8/8/1q3PPP/3R2K1 b - - 0 1",  # both sides one move from mate
    "r1b1k2r/ppppqppp/2n5/4P3/1b6/5N2/PPP1QPPP/RNB1KB1R b KQkq - 0 7",
]


def _rng(board: chess.Board) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(board.fen().encode()))


class TieEvaluator:
    """Per position (by its FEN): priors in thirds and values in tenths (inexact: sums round), so
    that equal scores are common."""

    def evaluate_legal(
        self, boards: Sequence[chess.Board], actions: Sequence[np.ndarray]
    ) -> tuple[list[np.ndarray], list[float]]:
        priors, values = [], []
        for board, a in zip(boards, actions, strict=True):
            rng = _rng(board)
            w = rng.integers(1, 4, size=len(a)).astype(np.float64)
            priors.append(w / w.sum())
            values.append(float(rng.integers(-10, 11)) / 10)
        return priors, values


class LogitEvaluator:
    """Per position: logits in halves (equal priors are common) and values in tenths; a leaf
    keeps its logits until a walk lists its moves."""

    def evaluate_logits(self, boards: Sequence[chess.Board]) -> tuple[np.ndarray, list[float]]:
        rngs = [_rng(board) for board in boards]
        logits = np.zeros((len(boards), NUM_ACTIONS), dtype=np.float32)
        for row, r in zip(logits, rngs, strict=True):
            row[:] = r.integers(0, 3, NUM_ACTIONS) / 2
        return logits, [float(r.integers(-10, 11)) / 10 for r in rngs]


@pytest.fixture(scope="module")
def grown() -> tuple[ArrayTree, np.ndarray, list[Node]]:
    """One searcher's tree of every position in ``FENS`` (kept alive by the returned roots): every
    other game on native boards (leaves list their moves when evaluated), the rest on python-chess
    boards (most leaves evaluated, their moves not listed yet)."""
    mcts = BatchedMCTS(LogitEvaluator(), MCTSConfig(simulations=40, leaves_per_game=2), seed=0)
    roots = []
    for k, fen in enumerate(FENS):
        mcts_leaves.NATIVE_BOARDS = k % 2 == 0
        try:
            roots.append(Node(chess.Board(fen)))
        finally:
            mcts_leaves.NATIVE_BOARDS = True
    assert {root._tree.native[root._id] for root in roots} == {True, None}
    mcts.search(roots, seeds=list(range(len(roots))))
    return mcts.tree, np.array([r._id for r in roots], dtype=np.int64), roots


def copy_tree(tree: ArrayTree, ids: np.ndarray) -> tuple[ArrayTree, np.ndarray]:
    """A new tree holding the subtrees of ``ids``, and their ids there."""
    nodes = tree.subtree(ids)
    fresh = ArrayTree()
    new = fresh.copy_from(tree, nodes)
    remap = np.full(tree.n_nodes, -1, dtype=np.int64)
    remap[nodes] = new
    return fresh, remap[ids]


def bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.int64) if a.dtype == np.float64 else a


def pick_args(t: Any) -> tuple[np.ndarray, ...]:
    return (t.first, t.count, t.N, t.W, t.Q, t.Psel, t.visits, t.value, t.mate)


def nan_or(fpu: float | None) -> float:
    return math.nan if fpu is None else fpu


def test_docstring_examples() -> None:
    result = doctest.testmod(mc, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def random_stats(tree: ArrayTree, rng: np.random.Generator) -> SimpleNamespace:
    """``tree``'s node ranges with random small statistics: many ties and unvisited edges, Q set
    where N is 0 too, some NaN values and known mates."""
    ne, nn = tree.n_edges, tree.n_nodes
    count = tree.count[:nn].copy()
    n = rng.integers(0, 4, ne)
    w = rng.integers(-6, 7, ne) / 4.0
    q = np.where(n > 0, w / np.maximum(n, 1), rng.integers(-2, 3, ne) / 2.0)
    value = rng.integers(-4, 5, nn) / 4.0
    value[rng.random(nn) < 0.1] = math.nan
    mate = np.full(nn, -1, dtype=np.int64)
    lucky = np.flatnonzero((count > 0) & (rng.random(nn) < 0.05))
    mate[lucky] = rng.integers(0, count[lucky])
    return SimpleNamespace(
        first=tree.first[:nn].copy(),
        count=count,
        n_edges=ne,
        N=n,
        W=w,
        Q=q,
        Psel=np.where(rng.random(ne) < 0.5, tree.Psel[:ne], rng.integers(1, 4, ne) / 8.0),
        visits=np.where(rng.random(nn) < 0.2, 0, rng.integers(0, 12, nn)),
        value=value,
        mate=mate,
    )


@pytest.mark.parametrize("fpu", [None, 0.0, 0.25])
def test_pick_is_puct_pick_on_real_trees(
    grown: tuple[ArrayTree, np.ndarray, list[Node]], fpu: float | None
) -> None:
    tree = grown[0]
    nodes = np.arange(tree.n_nodes)
    assert (tree.count[nodes] == 0).any() and (tree.count[nodes] > 0).any()
    rng = np.random.default_rng(7)
    for t in [tree] + [random_stats(tree, rng) for _ in range(4)]:
        got = puct_pick_nodes(*pick_args(t), nodes, 1.5, nan_or(fpu))
        assert got.dtype == np.int64
        assert np.array_equal(got, puct_pick(t, nodes, 1.5, fpu))  # type: ignore[arg-type]
        listed = nodes[t.count[nodes] > 0]
        alone = [puct_pick_one(t, i, 1.5, fpu) for i in listed.tolist()]  # type: ignore[arg-type]
        assert np.array_equal(got[listed], alone)


@pytest.mark.parametrize("fpu", [None, 0.3])
def test_pick_breaks_ties_within_one_rounding_as_puct_pick(fpu: float | None) -> None:
    """Every node holds two edges whose scores are equal as the reference rounds them (one
    scored by the formula, the other a plain Q): the first wins. A kernel computing in another
    order (or summing W pairwise) would pick the other one on some nodes."""
    rng = np.random.default_rng(3)
    k, m, c_puct = 400, 12, 1.37
    first = np.arange(k) * m
    n = rng.integers(1, 6, k * m)
    w = rng.normal(size=k * m)
    q = np.full(k * m, -1e3)  # every other edge loses
    psel = rng.random(k * m)
    visits = np.where(rng.random(k) < 0.1, 0, rng.integers(1, 60, k))
    value = rng.normal(size=k)
    j, other = np.array([rng.choice(m, 2, replace=False) for _ in range(k)]).T
    ej, eo = first + j, first + other
    n[ej] = 0 if fpu is not None else n[ej]
    q[ej] = rng.normal(size=k)
    # the score of edge j, in the reference's operations
    sq = np.sqrt(np.maximum(visits, 1))
    u = (c_puct * psel[ej]) * (sq / (1.0 + n[ej]))
    if fpu is not None:
        wsum = w.reshape(k, m).cumsum(axis=1)[:, -1]
        mean = np.where(visits > 0, wsum / np.maximum(visits, 1), value)
        score = (mean - fpu) + u
        other_sum = w.reshape(k, m).sum(axis=1)  # pairwise: rounds differently on some nodes
        assert (other_sum != wsum).any()
    else:
        score = q[ej] + u
    assert ((q[ej] + c_puct * psel[ej] * sq / (1.0 + n[ej])) != score).any()  # another order differs
    psel[eo], n[eo], q[eo] = 0.0, 1, score
    t = SimpleNamespace(
        first=first,
        count=np.full(k, m),
        n_edges=k * m,
        N=n,
        W=w,
        Q=q,
        Psel=psel,
        visits=visits,
        value=value,
        mate=np.full(k, -1),
    )
    nodes = np.arange(k)
    want = puct_pick(t, nodes, c_puct, fpu)  # type: ignore[arg-type]
    assert np.array_equal(want, first + np.minimum(j, other))  # the construction is exact
    assert np.array_equal(puct_pick_nodes(*pick_args(t), nodes, c_puct, nan_or(fpu)), want)


def test_pick_takes_the_first_nan_as_argmax() -> None:
    t = SimpleNamespace(
        first=np.array([0]),
        count=np.array([3]),
        n_edges=3,
        N=np.array([1, 1, 1]),
        W=np.zeros(3),
        Q=np.array([5.0, math.nan, math.nan]),
        Psel=np.full(3, 0.1),
        visits=np.array([3]),
        value=np.array([0.0]),
        mate=np.array([-1]),
    )
    nodes = np.array([0])
    assert puct_pick_nodes(*pick_args(t), nodes, 1.5, math.nan).tolist() == [1]
    assert puct_pick(t, nodes, 1.5, None).tolist() == [1]  # type: ignore[arg-type]


def same_trees(a: ArrayTree, ids_a: np.ndarray, b: ArrayTree, ids_b: np.ndarray) -> None:
    """The trees hold the same positions (matched by their move paths from the roots) with the
    same statistics, bit for bit; their ids may differ (children made in another order)."""
    pairs, edge_pairs = [], []
    stack = list(zip(ids_a.tolist(), ids_b.tolist(), strict=True))
    while stack:
        x, y = stack.pop()
        pairs.append((x, y))
        assert a.ready[x] == b.ready[y] and a.count[x] == b.count[y]
        if not a.ready[x]:
            continue
        ea, eb = a.edges(x), b.edges(y)
        edge_pairs += zip(range(ea.start, ea.stop), range(eb.start, eb.stop), strict=True)
        ca, cb = a.child[ea], b.child[eb]
        assert np.array_equal(ca >= 0, cb >= 0)
        stack += zip(ca[ca >= 0].tolist(), cb[cb >= 0].tolist(), strict=True)
    assert len(pairs) == a.n_nodes == b.n_nodes  # nothing made off the walks
    na, nb = np.array(pairs).T
    for name in ("value", "terminal", "visits", "mate", "walk", "lrow"):
        assert np.array_equal(bits(getattr(a, name)[na]), bits(getattr(b, name)[nb])), name
    ea_, eb_ = np.array(edge_pairs, dtype=np.int64).reshape(-1, 2).T
    for name in ("N", "W", "Q", "P", "Psel", "action"):
        assert np.array_equal(bits(getattr(a, name)[ea_]), bits(getattr(b, name)[eb_])), name


def expand_fresh(mcts: BatchedMCTS, leaves: np.ndarray) -> None:
    """``BatchedMCTS.search``'s expansion of a round's new leaves (each once, first seen first)."""
    tree = mcts.tree
    fresh = leaves[np.isnan(tree.value[leaves]) & np.isnan(tree.terminal[leaves])]
    if len(fresh):
        _, first = np.unique(fresh, return_index=True)
        mcts._expand(fresh[np.sort(first)])


@pytest.mark.parametrize(
    ("leaves_per_game", "virtual", "evaluator", "width"),
    [
        (1, False, TieEvaluator, 32),
        (1, True, TieEvaluator, 1),
        (3, True, TieEvaluator, 2),
        (3, True, LogitEvaluator, 32),
    ],
)
@pytest.mark.parametrize("fpu", [None, 0.2])
def test_rounds_match_descend_and_backup(
    grown: tuple[ArrayTree, np.ndarray, list[Node]],
    monkeypatch: pytest.MonkeyPatch,
    leaves_per_game: int,
    virtual: bool,
    evaluator: Callable[[], Any],
    width: int,
    fpu: float | None,
) -> None:
    """Rounds of a batched search (each game 1..leaves_per_game passes, every pass descended
    with the earlier passes' virtual losses in place, the fresh leaves expanded, the passes backed
    up in order) on two copies of a searched tree: NumPy's ``_descend``/``_backup`` on one, the
    kernels (through :func:`descend_tree`, paths as narrow as ``width``) on the other."""
    seen: set[int] = set()

    def spy(*args: Any) -> None:
        descend(*args)
        seen.update(args[16][args[17]].tolist())  # status[walkers]

    monkeypatch.setattr(mc, "descend", spy)
    tree, ids, _ = grown
    tree_a, ids_a = copy_tree(tree, ids)
    tree_b, ids_b = copy_tree(tree, ids)
    cfg = MCTSConfig(leaves_per_game=leaves_per_game, fpu_reduction=fpu, virtual_loss=0.3)
    ref, new = BatchedMCTS(evaluator(), cfg), BatchedMCTS(evaluator(), cfg)
    ref.tree, new.tree = tree_a, tree_b
    before = tree_a.visits[ids_a].copy()
    rng = np.random.default_rng(leaves_per_game)
    for _ in range(6):
        k = rng.integers(1, leaves_per_game + 1, len(ids))
        games = [np.flatnonzero(k > j) for j in range(int(k.max()))]
        passes_a = [ref._descend(g, ids_a, virtual) for g in games]
        passes_b = [
            descend_tree(new.tree, ids_b[g], cfg.c_puct, fpu, virtual, cfg.virtual_loss, width) for g in games
        ]
        for p, q in zip(passes_a, passes_b, strict=True):
            rows = np.concatenate(p[1]) if p[1] else np.zeros(0, dtype=np.int64)
            assert np.array_equal(q.depth, np.bincount(rows, minlength=len(q.depth)))
        expand_fresh(ref, np.concatenate([p[0] for p in passes_a]))
        expand_fresh(new, np.concatenate([p.leaves for p in passes_b]))
        for p in passes_a:
            ref._backup(*p, virtual)
        for q in passes_b:
            backup_tree(new.tree, q, virtual, cfg.virtual_loss)
        before += k
        assert np.array_equal(ref.tree.visits[ids_a], before)
    same_trees(ref.tree, ids_a, new.tree, ids_b)
    assert {LEAF, NEEDS_EDGES, NEEDS_CHILD} <= seen
    assert (NEEDS_ROOM in seen) == (width < 4)


def test_descend_resumes_after_each_stop(grown: tuple[ArrayTree, np.ndarray, list[Node]]) -> None:
    """Driven by hand: an empty list of walkers (nothing moves), a full path (the arrays grown,
    the walk goes on), moves not listed (listed, the walk goes on), a missing child (made, then
    the walker resumed: a leaf); the same walks as :func:`descend_tree` in one go."""
    tree, ids = copy_tree(*grown[:2])

    def walk_args() -> tuple[np.ndarray, ...]:  # the tree's arrays now (making children grows them)
        return (*pick_args(tree), tree.child, tree.walk, tree.ready)

    g = len(ids)
    cur, depth, status = ids.copy(), np.zeros(g, dtype=np.int64), np.full(g, -1, dtype=np.int64)
    nodes, edges = np.full((g, 1), -1, dtype=np.int64), np.full((g, 1), -1, dtype=np.int64)
    stats = [a.copy() for a in (tree.N, tree.W, tree.Q, tree.visits)]
    none = np.zeros(0, dtype=np.int64)
    assert puct_pick_nodes(*pick_args(tree), none, 1.5, math.nan).shape == (0,)
    descend(*walk_args(), cur, nodes, edges, depth, status, none, 1.5, 0.1, True, 1.0)
    assert (status == -1).all() and (depth == 0).all() and (cur == ids).all()
    assert all(
        np.array_equal(s, a) for s, a in zip(stats, (tree.N, tree.W, tree.Q, tree.visits), strict=True)
    )
    backup(
        tree.N,
        tree.W,
        tree.Q,
        tree.visits,
        tree.value,
        tree.terminal,
        cur,
        nodes,
        edges,
        depth,
        none,
        True,
        1.0,
    )
    assert all(
        np.array_equal(s, a) for s, a in zip(stats, (tree.N, tree.W, tree.Q, tree.visits), strict=True)
    )

    walkers = np.arange(g, dtype=np.int64)
    stops = []
    for _ in range(100):
        descend(*walk_args(), cur, nodes, edges, depth, status, walkers, 1.5, 0.1, True, 1.0)
        stops += status[walkers].tolist()
        if (status[walkers] == NEEDS_ROOM).any():
            assert (depth[walkers[status[walkers] == NEEDS_ROOM]] == nodes.shape[1]).all()
            nodes = np.pad(nodes, ((0, 0), (0, 1)), constant_values=-1)
            edges = np.pad(edges, ((0, 0), (0, 1)), constant_values=-1)
        for w in walkers[status[walkers] == NEEDS_EDGES].tolist():
            ensure_edges(tree, cur[[w]])
        for w in walkers[status[walkers] == NEEDS_CHILD].tolist():
            d = depth[w] - 1
            cur[w] = make_child(tree, int(nodes[w, d]), int(edges[w, d] - tree.first[nodes[w, d]]))
        walkers = walkers[status[walkers] != LEAF]
        if not len(walkers):
            break
    assert not len(walkers) and {NEEDS_ROOM, NEEDS_EDGES, NEEDS_CHILD, LEAF} <= set(stops)
    assert (status == LEAF).all() and not tree.walk[cur].any()
    # the same walks in one go, with room enough, on another copy
    other, ids_o = copy_tree(*grown[:2])
    paths = descend_tree(other, ids_o, 1.5, 0.1, True, 1.0)
    assert np.array_equal(paths.depth, depth) and nodes.shape[1] == depth.max()
    same_trees(tree, ids, other, ids_o)


def _compiled_or_not(
    monkeypatch: pytest.MonkeyPatch,
    evaluator: Callable[[], Any],
    cfg: MCTSConfig,
    fens: Sequence[str],
    searches: int,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The roots' N, W, Q (bits) after ``searches`` searches and advances, compiled and in NumPy."""

    def run(compiled: bool) -> list[np.ndarray]:
        monkeypatch.setattr(BatchedMCTS, "compiled", compiled)
        mcts = BatchedMCTS(evaluator(), cfg, seed=1)
        roots = [Node(chess.Board(fen)) for fen in fens]
        stats = []
        for _ in range(searches):
            mcts.search(roots)
            stats += [bits(a).copy() for r in roots for a in (r.N, r.W, r.Q)]
            roots = [BatchedMCTS.advance(r, r.best_move()) for r in roots]
        return stats

    return run(True), run(False)


@pytest.mark.parametrize("fpu", [None, 0.2])
def test_a_search_is_the_same_compiled_or_not(fpu: float | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """``BatchedMCTS`` with its compiled walks and with the NumPy ones: the same root statistics
    bit for bit, over searches and advances, several leaves per game."""
    cfg = MCTSConfig(simulations=24, leaves_per_game=3, fpu_reduction=fpu)
    compiled, reference = _compiled_or_not(monkeypatch, TieEvaluator, cfg, FENS[:3], 2)
    assert all(np.array_equal(a, b) for a, b in zip(compiled, reference, strict=True))


@pytest.mark.parametrize(("leaves_per_game", "evaluator"), [(1, LogitEvaluator), (3, TieEvaluator)])
def test_a_gumbel_search_is_the_same_compiled_or_not(
    leaves_per_game: int, evaluator: Callable[[], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Gumbel's selection compiled (:func:`descend_gumbel`) and in NumPy: the same moves chosen,
    the same root visits and values bit for bit, over searches and advances."""
    cfg = MCTSConfig(search="gumbel", simulations=48, gumbel_actions=4, leaves_per_game=leaves_per_game)
    compiled, reference = _compiled_or_not(monkeypatch, evaluator, cfg, (*FENS[:3], FENS[5]), 3)
    assert all(np.array_equal(a, b) for a, b in zip(compiled, reference, strict=True))
