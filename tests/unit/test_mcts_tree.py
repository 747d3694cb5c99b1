"""The array tree under the batched search: PUCT picked for many nodes at once as one node alone
picks it, visit bookkeeping over whole trees, leaves whose moves are listed only when walked
through, compaction and moving trees between searchers, on hand-made positions."""

from __future__ import annotations

import doctest
import math
import random
from collections.abc import Iterator

import chess
import numpy as np
import pytest
import torch

import chessrl.search.gumbel
import chessrl.search.mcts_leaves
import chessrl.search.mcts_tree
from chessrl.search.board_encoding import legal_indices
from chessrl.search.mcts import (
    BatchedMCTS,
    MCTSConfig,
    NetworkEvaluator,
    Node,
    UniformEvaluator,
    terminal_value,
)
from chessrl.search.mcts_tree import ArrayTree, edge_ranges, padded_edges, puct_pick
from chessrl.search.network import NetConfig, PolicyValueNet
from chessrl.search.search_board import copy_fast, leaf_terminal, may_check, maybe_threefold

MIDDLEGAME = "r1bqkb1r/pppp1ppp/2n2n2/4p3/2B1P3/5N2/PPPP1PPP/RNBQK2R w KQkq - 4 4"
ENDGAME = "8/8/4k3/8/2K5/8/4P3/8 w - - 0 1"


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    """Tiny networks: threads only contend (and slow down a lot on a busy machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("module", [chessrl.search.mcts_tree, chessrl.search.gumbel])
def test_docstring_examples(module: object) -> None:
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)  # type: ignore[arg-type]
    assert result.attempted > 0 and result.failed == 0


def hand_tree() -> tuple[ArrayTree, np.ndarray]:
    """Three expanded nodes with 3, 2 and 4 moves and hand-set statistics."""
    tree = ArrayTree(2, 4)  # small: the arrays must grow
    ids = []
    for k in (3, 2, 4):
        ids.append(tree.add_node(None, [None] * k, np.arange(k) + 100, math.nan))
    nodes = np.array(ids)
    tree.set_priors(
        nodes, np.array([0.6, 0.3, 0.1, 0.5, 0.5, 0.1, 0.2, 0.3, 0.4]), np.array([0.2, -0.5, 0.0])
    )
    # node 0: visits 4 (3, 1, 0); node 1: none; node 2: visits 6 (0, 2, 1, 3)
    for node, n, w in ((0, [3, 1, 0], [0.9, -0.8, 0.0]), (2, [0, 2, 1, 3], [0.0, 1.0, -1.0, 0.3])):
        e = tree.edges(node)
        tree.N[e] = n
        tree.W[e] = w
        tree.Q[e] = np.where(np.array(n) > 0, np.array(w) / np.maximum(n, 1), 0.0)
        tree.visits[node] = sum(n)
    return tree, nodes


def scalar_puct(tree: ArrayTree, node: int, c: float, fpu: float | None) -> int:
    """The textbook formula, one move at a time."""
    e = tree.edges(node)
    n, w, p = tree.N[e].tolist(), tree.W[e].tolist(), tree.Psel[e].tolist()
    visits = int(tree.visits[node])
    mean = (sum(w) / visits) if visits else float(tree.value[node])
    scores = []
    for pi, ni, wi in zip(p, n, w, strict=True):
        q = wi / ni if ni else (0.0 if fpu is None else mean - fpu)
        scores.append(q + c * pi * math.sqrt(max(visits, 1)) / (1 + ni))
    return scores.index(max(scores))


@pytest.mark.parametrize("fpu", [None, 0.3])
@pytest.mark.parametrize("c_puct", [0.5, 1.5, 4.0])
def test_puct_pick_for_many_nodes_is_the_textbook_choice_of_each(c_puct: float, fpu: float | None) -> None:
    tree, nodes = hand_tree()
    picks = puct_pick(tree, nodes, c_puct, fpu) - tree.first[nodes]
    assert picks.tolist() == [scalar_puct(tree, int(i), c_puct, fpu) for i in nodes]
    # node 1 has no visits: the bigger prior, the first on the tie
    assert picks[1] == 0
    tree.mate[2] = 3  # a move known to mate is always taken
    assert (puct_pick(tree, nodes, c_puct, fpu) - tree.first[nodes])[2] == 3


def test_padded_edges_and_ranges() -> None:
    tree, nodes = hand_tree()
    idx, valid = padded_edges(tree, nodes)
    assert valid.sum(axis=1).tolist() == [3, 2, 4]
    assert idx[valid].tolist() == list(range(9))
    ranges, rows = edge_ranges(tree.first[nodes[[2, 0]]], tree.count[nodes[[2, 0]]])
    assert ranges.tolist() == [5, 6, 7, 8, 0, 1, 2] and rows.tolist() == [0, 0, 0, 0, 1, 1, 1]


def test_random_trees_pick_like_one_node_alone() -> None:
    rng = np.random.default_rng(0)
    tree = ArrayTree()
    ids = [tree.add_node(None, [None] * k, np.arange(k), math.nan) for k in rng.integers(1, 40, size=50)]
    nodes = np.array(ids)
    counts = tree.count[nodes]
    priors = np.concatenate([rng.dirichlet(np.ones(k)) for k in counts])
    tree.set_priors(nodes, priors, rng.uniform(-1, 1, size=len(ids)))
    for i in ids:
        e = tree.edges(i)
        n = rng.integers(0, 5, size=e.stop - e.start) * rng.integers(0, 2, size=e.stop - e.start)
        tree.N[e] = n
        tree.W[e] = rng.uniform(-1, 1, size=len(n)) * n
        tree.Q[e] = np.where(n > 0, tree.W[e] / np.maximum(n, 1), 0.0)
        tree.visits[i] = n.sum()
    for fpu in (None, 0.25):
        picks = puct_pick(tree, nodes, 1.5, fpu) - tree.first[nodes]
        assert picks.tolist() == [scalar_puct(tree, i, 1.5, fpu) for i in ids]


def walk(node: Node) -> list[Node]:
    out = [node]
    for child in node.children:
        if child is not None:
            out += walk(child)
    return out


@pytest.mark.parametrize("leaves_per_game", [1, 4])
def test_every_node_of_a_searched_tree_adds_up(leaves_per_game: int) -> None:
    """Over whole trees: a node's visits are its moves' visits, and a move's visits are its
    child's visits plus the one that expanded it; virtual losses all taken back."""
    roots = [Node(chess.Board(f)) for f in (chess.STARTING_FEN, MIDDLEGAME, ENDGAME)]
    mcts = BatchedMCTS(
        UniformEvaluator(0.1), MCTSConfig(simulations=60, leaves_per_game=leaves_per_game), seed=3
    )
    mcts.search(roots)
    for root in roots:
        assert int(root.N.sum()) == 60
        for node in walk(root):
            if not node.expanded:
                continue
            assert node.visits == int(node.N.sum())
            np.testing.assert_allclose(node.Q, np.where(node.N > 0, node.W / np.maximum(node.N, 1), 0.0))
            for i, child in enumerate(node.children):
                if child is not None and child.terminal is None and child.expanded:
                    assert int(child.N.sum()) == int(node.N[i]) - 1
                    # values alternate sides: the child's W is from the other side
                    assert node.W[i] == pytest.approx(-(child.W.sum() + child.value))


def test_native_leaves_keep_their_legal_priors_not_the_logits() -> None:
    """On native boards a leaf lists its moves when evaluated (compiled, cheap) and keeps the
    softmax of its legal logits, not the network's row of 4,672."""
    torch.manual_seed(0)
    net = PolicyValueNet(NetConfig(blocks=1, channels=8, history=2, value_hidden=8)).eval()
    mcts = BatchedMCTS(NetworkEvaluator(net), MCTSConfig(simulations=40), seed=0)
    root = Node(chess.Board(MIDDLEGAME))
    mcts.search([root], add_noise=False)
    tree = mcts.tree
    ids = tree.subtree(np.array([root._id]))
    expanded = ids[~np.isnan(tree.value[ids])]
    assert len(expanded) == 41 and tree.ready[expanded].all() and tree.n_rows == 0
    leaf = Node._of(tree, int(expanded[-1]))
    logits, _ = net.predict(chessrl.search.mcts.encode_boards([leaf.board], 2))
    moves, actions = legal_indices(leaf.board)
    assert leaf.moves == moves
    expected = torch.softmax(torch.from_numpy(logits[0][actions]).double(), dim=0).numpy()
    np.testing.assert_allclose(leaf.priors, expected, rtol=1e-5)


def test_leaves_list_their_moves_only_when_walked_through(monkeypatch: pytest.MonkeyPatch) -> None:
    """On python-chess boards (listing moves costs): a leaf keeps its row of logits until a walk
    goes through it."""
    monkeypatch.setattr(chessrl.search.mcts_leaves, "NATIVE_BOARDS", False)
    torch.manual_seed(0)
    net = PolicyValueNet(NetConfig(blocks=1, channels=8, history=2, value_hidden=8)).eval()
    mcts = BatchedMCTS(NetworkEvaluator(net), MCTSConfig(simulations=40), seed=0)
    root = Node(chess.Board(MIDDLEGAME))
    mcts.search([root], add_noise=False)
    tree = mcts.tree
    ids = tree.subtree(np.array([root._id]))  # the array tree itself: no handle lists moves
    expanded = ids[~np.isnan(tree.value[ids])]
    unlisted = expanded[~tree.ready[expanded]]
    assert len(expanded) == 41 and len(unlisted) >= 10  # many leaves are never walked through
    assert int(tree.count[unlisted].sum()) == 0 and (tree.lrow[unlisted] >= 0).all()
    assert len(np.unique(tree.lrow[unlisted])) == len(unlisted) and tree.n_rows <= len(tree.logits)
    # asking for a leaf's moves lists them, with the softmax of the network's legal logits
    leaf = Node._of(tree, int(unlisted[0]))
    logits, _ = net.predict(chessrl.search.mcts.encode_boards([leaf.board], 2))
    moves, actions = legal_indices(leaf.board)
    assert leaf.moves == moves
    expected = torch.softmax(torch.from_numpy(logits[0][actions]).double(), dim=0).numpy()
    np.testing.assert_allclose(leaf.priors, expected, rtol=1e-5)


class LegalOnly:
    """NetworkEvaluator without logits: every leaf gets its moves and priors at once."""

    def __init__(self, inner: NetworkEvaluator) -> None:
        self.inner = inner

    def evaluate_legal(self, boards, actions):  # type: ignore[no-untyped-def]
        return self.inner.evaluate_legal(boards, actions)


def test_lazy_and_eager_priors_give_the_same_search() -> None:
    torch.manual_seed(2)
    net = PolicyValueNet(NetConfig(blocks=1, channels=8, history=2, value_hidden=8)).eval()
    runs = []
    for evaluator in (NetworkEvaluator(net), LegalOnly(NetworkEvaluator(net))):
        roots = [Node(chess.Board(f)) for f in (MIDDLEGAME, ENDGAME, chess.STARTING_FEN)]
        mcts = BatchedMCTS(evaluator, MCTSConfig(simulations=50, leaves_per_game=2), seed=1)  # type: ignore[arg-type]
        mcts.search(roots, seeds=[1, 2, 3])
        mcts.search(roots, seeds=[4, 5, 6])
        runs.append([(r.N.copy(), r.W.copy()) for r in roots])
    for (n1, w1), (n2, w2) in zip(*runs, strict=True):
        np.testing.assert_array_equal(n1, n2)
        np.testing.assert_allclose(w1, w2, rtol=1e-12)


def random_positions(count: int, seed: int) -> list[chess.Board]:
    rnd = random.Random(seed)
    out = []
    while len(out) < count:
        board = chess.Board()
        for _ in range(rnd.randrange(1, 160)):
            moves = list(board.legal_moves)
            if not moves:
                break
            board.push(rnd.choice(moves))
        out.append(board)
    return out


def test_a_leaf_is_scored_exactly_without_listing_its_moves() -> None:
    boards = random_positions(250, seed=5) + [
        chess.Board("7k/5Q2/6K1/8/8/8/8/8 b - - 0 1"),  # stalemate
        chess.Board("3R2k1/5ppp/8/8/8/8/5PPP/6K1 b - - 1 1"),  # mated
        chess.Board("k7/P7/K7/8/8/8/8/8 b - - 0 1"),  # stalemate, pawns present
        chess.Board("4k3/8/8/8/8/8/4q3/4K3 w - - 0 1"),  # check: the king takes
        chess.Board("4k3/8/8/8/1b6/8/3N4/4K3 w - - 0 1"),  # pinned knight, the king moves
    ]
    finished = 0
    for board in boards:
        assert leaf_terminal(board) == terminal_value(board), board.fen()
        finished += terminal_value(board) is not None
    assert finished >= 3


def test_a_checkmated_child_makes_its_move_the_mate() -> None:
    root = Node(chess.Board("6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1"))
    i = root.moves.index(chess.Move.from_uci("d1d8"))
    child = root.child(i)
    assert child.terminal == -1.0 and root.mate_index == i
    assert not root._tree.ready[child._id] and child.moves == []  # listed on demand: none


def test_kept_logits_are_rows_of_one_buffer_taken_once() -> None:
    tree = ArrayTree()
    ids = np.array([tree.add_node(None, None, None, math.nan) for _ in range(3)])
    rows = np.arange(3 * 5, dtype=np.float32).reshape(3, 5)
    tree.keep_logits(ids[[0, 2]], rows[[0, 2]])
    tree.keep_logits(ids[[1]], rows[[1]])
    np.testing.assert_array_equal(tree.take_logits(int(ids[2])), rows[2])
    assert tree.take_logits(int(ids[2])) is None  # taken once
    [copy] = tree.copy_from(tree, ids[[1]])  # its row travels with a copied node
    np.testing.assert_array_equal(tree.take_logits(int(copy)), rows[1])
    with pytest.raises(ValueError, match="width 4 for a tree keeping 5"):
        tree.keep_logits(ids[[0]], np.zeros((1, 4), dtype=np.float32))
    narrow = ArrayTree()
    narrow.keep_logits(
        np.array([narrow.add_node(None, None, None, math.nan)]), np.zeros((1, 4), dtype=np.float32)
    )
    before = (tree.n_nodes, tree.n_edges, len(tree.boards))
    with pytest.raises(ValueError, match="width 4 for a tree keeping 5"):
        tree.copy_from(narrow, np.array([0]))
    assert (tree.n_nodes, tree.n_edges, len(tree.boards)) == before  # refused before appending anything
    # float64 logits are kept as float64 (the rows already kept are carried over)
    wide = np.full((1, 5), 1 / 3, dtype=np.float64)
    tree.keep_logits(ids[[2]], wide)
    assert tree.logits.dtype == np.float64 and tree.take_logits(int(ids[2]))[0] == 1 / 3
    np.testing.assert_array_equal(tree.take_logits(int(ids[0])), rows[0])


@pytest.mark.parametrize(("network", "native"), [(False, True), (True, True), (True, False)])
def test_compaction_keeps_the_live_trees_and_the_same_search(
    network: bool, native: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a network on python-chess boards, unwalked leaves keep rows of logits: compaction
    carries the kept ones (the same search after it) and drops the rest. Native leaves keep none."""
    monkeypatch.setattr(chessrl.search.mcts_leaves, "NATIVE_BOARDS", native)
    lazy_rows = network and not native
    torch.manual_seed(0)
    net = PolicyValueNet(NetConfig(blocks=1, channels=8, history=2, value_hidden=8)).eval()

    def play(compact_edges: int) -> tuple[list[list[int]], int, int]:
        evaluator = NetworkEvaluator(net) if network else UniformEvaluator()
        mcts = BatchedMCTS(evaluator, MCTSConfig(simulations=30), seed=0)
        mcts.COMPACT_EDGES = mcts.COMPACT_NODES = compact_edges
        roots = [Node(chess.Board()), Node(chess.Board(MIDDLEGAME))]
        kept = roots[1]  # an old root someone still holds
        for ply in range(6):
            mcts.search(roots, seeds=[ply, ply + 10])
            roots = [BatchedMCTS.advance(r, r.best_move()) for r in roots]
        assert kept.expanded and int(kept.N.sum()) == 30 and kept.board.fen() == MIDDLEGAME
        tree = mcts.tree
        n = tree.n_nodes
        rows = tree.lrow[:n]
        lazy = ~np.isnan(tree.value[:n]) & ~tree.ready[:n]  # evaluated, moves never listed
        assert ((rows >= 0) == (lazy & lazy_rows)).all()
        assert len(np.unique(rows[rows >= 0])) == int(lazy.sum() * lazy_rows) <= tree.n_rows
        return [r.N.tolist() for r in roots], n, tree.n_rows

    plain, big, rows_big = play(1 << 30)
    compacted, small, rows_small = play(1)
    assert plain == compacted
    assert small < big and (rows_small < rows_big if lazy_rows else rows_small == rows_big == 0)


def test_roots_move_between_searchers_with_their_trees() -> None:
    root = Node(chess.Board(ENDGAME))
    first = BatchedMCTS(UniformEvaluator(), MCTSConfig(simulations=40), seed=0)
    first.search([root], add_noise=False)
    n_before = root.N.copy()
    child = root.child(int(np.argmax(root.N)))
    kept = child.N.copy()
    second = BatchedMCTS(UniformEvaluator(), MCTSConfig(simulations=10), seed=0)
    second.search([root], add_noise=False)
    assert root._tree is second.tree
    assert int(root.N.sum()) == 50
    # the handle held from the first tree still sees that tree as it was
    np.testing.assert_array_equal(child.N, kept)
    assert root.children[int(np.argmax(n_before))] is not child


def test_node_handles_are_stable_and_views_write_through() -> None:
    mcts = BatchedMCTS(UniformEvaluator(), MCTSConfig(simulations=20), seed=0)
    root = Node(chess.Board())
    mcts.search([root])
    kids = root.children
    again = root.children
    assert all(a is b for a, b in zip(kids, again, strict=True) if a is not None)
    root.N[:] = 0
    root.N[3] = 5
    assert mcts.choose_move(root, 100) == root.moves[3]
    with pytest.raises(IndexError):
        root.child(len(root.moves))


def test_a_board_copy_is_python_chess_s() -> None:
    for board in random_positions(30, seed=9):
        if board.is_game_over():
            continue
        mine = copy_fast(board)
        assert (
            mine == board
            and mine.move_stack == board.move_stack
            and mine.occupied_co is not board.occupied_co
        )
        for move in list(board.legal_moves)[:5]:
            a, b = copy_fast(mine), board.copy()
            a.push(move)
            b.push(move)
            assert a.fen() == b.fen() and a.move_stack == b.move_stack and a.occupied_co == b.occupied_co
            assert a.is_repetition(2) == b.is_repetition(2)
            a.pop()
            a.pop()
            b.pop()
            b.pop()
            assert a.fen() == b.fen()
        assert mine.fen() == board.fen() and mine.move_stack == board.move_stack  # the copies left it alone


def shuffling_games(count: int, seed: int) -> list[chess.Board]:
    """Random openings, then knight and king moves played and taken back (many repetitions),
    with a random move now and then; every position on the way."""
    rnd = random.Random(seed)
    out = []
    for _ in range(count):
        board = chess.Board()
        for _ in range(rnd.randrange(4, 40)):
            moves = list(board.legal_moves)
            if not moves:
                break
            board.push(rnd.choice(moves))
        for _ in range(rnd.randrange(2, 6)):
            played = []
            for _ in range(2):
                quiet = [
                    m
                    for m in board.legal_moves
                    if board.piece_type_at(m.from_square) in (chess.KNIGHT, chess.KING)
                    and not board.is_capture(m)
                ]
                if not quiet or board.is_game_over():
                    break
                played.append(
                    rnd.choice(quiet) if rnd.random() < 0.9 else rnd.choice(list(board.legal_moves))
                )
                board.push(played[-1])
                out.append(board.copy())
            for m in played:
                back = chess.Move(m.to_square, m.from_square)
                if board.is_game_over() or back not in board.legal_moves:
                    break
                board.push(back)
                out.append(board.copy())
    return out


def test_the_threefold_pre_check_never_hides_a_repetition() -> None:
    boards = shuffling_games(25, seed=1)
    repeated = 0
    for board in boards:
        if board.is_repetition(3):
            repeated += 1
            assert maybe_threefold(board), board.fen()
    assert repeated >= 20
    assert sum(maybe_threefold(b) for b in boards) < len(boards) // 2  # it does rule positions out


def test_the_check_pre_filter_never_hides_a_check() -> None:
    checks = skipped = 0
    boards = random_positions(80, seed=11) + [
        chess.Board("r3k2r/8/8/8/8/8/8/R3K2R w KQkq - 0 1"),  # castling
        chess.Board("8/8/8/2k5/3Pp3/8/8/4K2R b K d3 0 1"),  # en passant
        chess.Board("4k3/1P6/8/8/8/8/8/4K3 w - - 0 1"),  # promotion
        chess.Board("4k3/8/4N3/8/8/8/4R3/4K3 w - - 0 1"),  # discovered check
    ]
    for board in boards:
        for move in board.legal_moves:
            if board.gives_check(move):
                checks += 1
                assert may_check(board, move), (board.fen(), move.uci())
            else:
                skipped += not may_check(board, move)
    assert checks >= 30 and skipped >= 500  # it rules most quiet moves out
