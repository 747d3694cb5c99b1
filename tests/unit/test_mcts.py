"""Batched PUCT search: mates in one with a uniform prior, visit counts that add up, one evaluator
call per round, the same search batched and alone (and as a plain recursive search), subtree
reuse, the temperature schedule and exact terminal values."""

from __future__ import annotations

import math
from collections.abc import Sequence

import chess
import chess.polyglot
import numpy as np
import pytest
import torch

from chessrl.search.board_encoding import NUM_ACTIONS, encode_boards, legal_indices, legal_mask
from chessrl.search.mcts import (
    BatchedMCTS,
    MCTSConfig,
    NetworkEvaluator,
    Node,
    UniformEvaluator,
    terminal_value,
)
from chessrl.search.network import NetConfig, PolicyValueNet

MATES_IN_ONE = [
    # back-rank mate, white and black
    ("6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1", "d1d8"),
    ("3r2k1/5ppp/8/8/8/8/5PPP/6K1 b - - 0 1", "d8d1"),
    # scholar's mate: Qxf7#
    ("r1bqkbnr/pppp1ppp/2n5/4p3/2B1P3/5Q2/PPPP1PPP/RNB1K1NR w KQkq - 4 4", "f3f7"),
    # fool's mate: ...Qh4#
    ("rnbqkbnr/pppp1ppp/8/4p3/6P1/5P2/PPPPP2P/RNBQKBNR b KQkq g3 0 2", "d8h4"),
]

MIDDLEGAME = "r1bqkb1r/pppp1ppp/2n2n2/4p3/2B1P3/5N2/PPPP1PPP/RNBQK2R w KQkq - 4 4"
ENDGAME = "8/8/4k3/8/2K5/8/4P3/8 w - - 0 1"


def games(n: int) -> list[Node]:
    fens = [chess.STARTING_FEN, MIDDLEGAME, ENDGAME, MATES_IN_ONE[0][0], MATES_IN_ONE[3][0]]
    return [Node(chess.Board(fens[i % len(fens)])) for i in range(n)]


class WeightedEvaluator:
    """Deterministic, uneven integer priors by move and values by position, as a dict of moves:
    searches that differ in any step show it."""

    def __init__(self) -> None:
        self.calls = 0

    @staticmethod
    def weights(board: chess.Board) -> dict[chess.Move, float]:
        return {m: float((m.from_square * 7 + m.to_square * 13) % 10 + 1) for m in board.legal_moves}

    @staticmethod
    def value(board: chess.Board) -> float:
        return ((len(board.move_stack) * 37 + board.legal_moves.count() * 11) % 21 - 10) / 10

    def evaluate(self, boards: Sequence[chess.Board]) -> tuple[list[dict[chess.Move, float]], list[float]]:
        self.calls += 1
        return [self.weights(b) for b in boards], [self.value(b) for b in boards]


# --- Done when: mate in one, visits add up, one call per round, batched == alone --------------------


@pytest.mark.parametrize(("fen", "mate"), MATES_IN_ONE)
def test_uniform_prior_finds_mate_in_one(fen: str, mate: str) -> None:
    mcts = BatchedMCTS(UniformEvaluator(), MCTSConfig(simulations=120), seed=0)
    root = Node(chess.Board(fen))
    [pi] = mcts.search([root], add_noise=False)
    assert root.best_move().uci() == mate
    assert mcts.choose_move(root, move_number=100).uci() == mate
    assert int(np.argmax(pi)) == int(root.actions[root.moves.index(chess.Move.from_uci(mate))])
    assert root.visit_counts()[chess.Move.from_uci(mate)] > 60


@pytest.mark.parametrize("leaves_per_game", [1, 3, 8])
def test_root_visits_sum_to_the_simulations_run(leaves_per_game: int) -> None:
    mcts = BatchedMCTS(
        UniformEvaluator(), MCTSConfig(simulations=20, leaves_per_game=leaves_per_game), seed=1
    )
    roots = games(5)
    pis = mcts.search(roots)
    assert [int(r.N.sum()) for r in roots] == [20] * 5
    for pi in pis:
        assert pi.shape == (NUM_ACTIONS,) and pi.dtype == np.float32
        assert float(pi.sum()) == pytest.approx(1.0)
    for root, pi in zip(roots, pis, strict=True):
        indices, shares = root.sparse_visits()
        np.testing.assert_array_equal(pi[indices], shares)
        assert float(shares.sum()) == pytest.approx(1.0) and np.count_nonzero(pi) == len(indices)
    mcts.search(roots, simulations=7)
    assert [int(r.N.sum()) for r in roots] == [27] * 5
    assert mcts.simulations_run == 5 * 27
    # every node's visits: one per simulation that passed through it (the first one expanded it)
    for root in roots:
        for i, child in enumerate(root.children):
            if child is not None and child.terminal is None:
                assert int(child.N.sum()) == int(root.N[i]) - 1


@pytest.mark.parametrize("n_games", [1, 4, 7])
def test_one_evaluator_call_per_round_whatever_the_number_of_games(n_games: int) -> None:
    evaluator = UniformEvaluator()
    mcts = BatchedMCTS(evaluator, MCTSConfig(simulations=16), seed=0)
    roots = [Node(chess.Board(f)) for f in [chess.STARTING_FEN, MIDDLEGAME, ENDGAME] * 3][:n_games]
    mcts.search(roots)
    assert evaluator.calls == 1 + 16  # the roots in one call, then one call per round
    assert evaluator.positions == n_games * (1 + 16)
    mcts.search(roots)  # roots already expanded: rounds only
    assert evaluator.calls == 1 + 16 + 16
    assert mcts.evaluator_calls == evaluator.calls


def test_several_leaves_per_game_are_spread_by_virtual_loss() -> None:
    evaluator = UniformEvaluator()
    mcts = BatchedMCTS(evaluator, MCTSConfig(simulations=16, leaves_per_game=8), seed=0)
    roots = games(3)[:3]
    mcts.search(roots, add_noise=False)
    assert evaluator.calls == 1 + 2  # 16 simulations in rounds of 8 leaves per game
    assert evaluator.positions == 3 + 3 * 16  # every leaf distinct: the virtual loss steers away
    for root in roots:
        assert int(root.N.sum()) == 16
        assert int(root.N.max()) <= 2 and not root.W.any()  # virtual losses all taken back


@pytest.mark.parametrize("leaves_per_game", [1, 4])
@pytest.mark.parametrize("add_noise", [False, True])
def test_batched_search_equals_each_game_searched_alone(leaves_per_game: int, add_noise: bool) -> None:
    config = MCTSConfig(simulations=40, leaves_per_game=leaves_per_game)
    seeds = [11, 12, 13, 14, 15]
    batched = games(5)
    together = BatchedMCTS(WeightedEvaluator(), config, seed=0).search(
        batched, add_noise=add_noise, seeds=seeds
    )
    for i, seed in enumerate(seeds):
        alone = games(5)[i]
        [pi] = BatchedMCTS(WeightedEvaluator(), config, seed=99).search(
            [alone], add_noise=add_noise, seeds=[seed]
        )
        np.testing.assert_array_equal(alone.N, batched[i].N)
        np.testing.assert_array_equal(alone.W, batched[i].W)
        np.testing.assert_array_equal(pi, together[i])


class BoardLogitsEvaluator:
    """Like the network (raw logits over the whole action space, so leaves keep them until
    walked through), but each board's output depends on the board alone, never on the batch it
    came in (float32 convolutions round differently at another batch size): exact comparisons
    across batch sizes."""

    def evaluate_logits(self, boards: Sequence[chess.Board]) -> tuple[np.ndarray, list[float]]:
        rngs = [np.random.default_rng(chess.polyglot.zobrist_hash(b)) for b in boards]
        logits = np.stack([rng.normal(size=NUM_ACTIONS).astype(np.float32) for rng in rngs])
        return logits, [float(np.tanh(rng.normal())) for rng in rngs]


@pytest.mark.parametrize("fpu_reduction", [None, 0.2])
def test_a_game_alone_walks_like_a_batch_with_kept_logits(fpu_reduction: float | None) -> None:
    """One root searched alone takes the scalar path (its leaves keep their logits until walked
    through, first-play urgency from a slice): the same visits and values as in a batch of
    games, over several moves of one tree."""
    config = MCTSConfig(simulations=48, fpu_reduction=fpu_reduction)
    alone_search = BatchedMCTS(BoardLogitsEvaluator(), config, seed=0)  # type: ignore[arg-type]
    batch_search = BatchedMCTS(BoardLogitsEvaluator(), config, seed=0)  # type: ignore[arg-type]
    alone = Node(chess.Board(MIDDLEGAME))
    batch = [Node(chess.Board(MIDDLEGAME)), *games(3)]
    for ply in range(4):
        [pi] = alone_search.search([alone], seeds=[ply])
        together = batch_search.search(batch, seeds=[ply, 7, 8, 9])
        np.testing.assert_array_equal(alone.N, batch[0].N)
        np.testing.assert_allclose(alone.W, batch[0].W, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(pi, together[0])
        move = alone.best_move()
        alone = alone_search.advance(alone, move)
        batch = [batch_search.advance(batch[0], move), *games(3)]


@pytest.mark.parametrize("fpu_reduction", [None, 0.2])
@pytest.mark.parametrize("search", ["puct", "gumbel"])
def test_the_scalar_walk_of_one_game_is_the_batch_rounds_bit_for_bit(
    fpu_reduction: float | None, search: str
) -> None:
    """One root alone, scalar walk against the batch rounds (``scalar_alone`` off), the same
    network calls of one board: the same N and W to the last bit, over three moves."""
    torch.manual_seed(4)
    net = PolicyValueNet(NetConfig(blocks=1, channels=8, history=2, value_hidden=8)).eval()
    config = MCTSConfig(simulations=40, fpu_reduction=fpu_reduction, search=search)  # type: ignore[arg-type]
    searches = [BatchedMCTS(NetworkEvaluator(net), config, seed=0) for _ in range(2)]
    searches[1].scalar_alone = False
    called = []
    scalar = searches[0]._simulate_alone
    searches[0]._simulate_alone = lambda *a: called.append(a) or scalar(*a)  # type: ignore[method-assign]
    roots = [Node(chess.Board(MIDDLEGAME)) for _ in range(2)]
    for ply in range(3):
        pis = [s.search([r], seeds=[ply]) for s, r in zip(searches, roots, strict=True)]
        np.testing.assert_array_equal(roots[0].N, roots[1].N)
        np.testing.assert_array_equal(roots[0].W, roots[1].W)
        np.testing.assert_array_equal(pis[0][0], pis[1][0])
        move = roots[0].best_move()
        roots = [s.advance(r, move) for s, r in zip(searches, roots, strict=True)]
    assert len(called) == 3  # the first searcher did walk alone


def test_same_seed_same_search_and_noise_changes_it() -> None:
    def run(seed: int, add_noise: bool = True) -> np.ndarray:
        root = Node(chess.Board(MIDDLEGAME))
        BatchedMCTS(WeightedEvaluator(), MCTSConfig(simulations=60, dirichlet_alpha=0.3), seed=seed).search(
            [root], add_noise=add_noise
        )
        return root.N

    np.testing.assert_array_equal(run(3), run(3))
    assert any(not np.array_equal(run(3), run(s)) for s in (4, 5, 6))
    np.testing.assert_array_equal(run(3, add_noise=False), run(4, add_noise=False))


# --- the batched search is the textbook search ------------------------------------------------------


def reference_search(
    board: chess.Board,
    simulations: int,
    c_puct: float,
    noise_seed: int | None,
    alpha: float = 0.3,
    eps: float = 0.25,
) -> list[int]:
    """A plain recursive PUCT search, one simulation at a time, on dicts: root visit counts.
    A move seen to mate at once (any checking move at the root; elsewhere once visited) is
    selected from then on."""
    evaluator = WeightedEvaluator()
    tree: dict[tuple[str, ...], dict[str, list[float]]] = {}
    moves_of: dict[tuple[str, ...], list[chess.Move]] = {}
    mate_of: dict[tuple[str, ...], int] = {}

    def finished(b: chess.Board) -> float | None:
        outcome = b.outcome(claim_draw=False)
        if outcome is not None:
            return 0.0 if outcome.winner is None else -1.0
        if b.is_repetition(3) or b.can_claim_fifty_moves():
            return 0.0
        return None

    def expand(b: chess.Board, key: tuple[str, ...]) -> float:
        moves = list(b.legal_moves)
        weights = evaluator.weights(b)
        total = sum(weights[m] for m in moves)
        moves_of[key] = moves
        tree[key] = {
            "P": [weights[m] / total for m in moves],
            "N": [0.0] * len(moves),
            "W": [0.0] * len(moves),
        }
        return evaluator.value(b)

    def simulate(b: chess.Board, key: tuple[str, ...]) -> float:
        done = finished(b)
        if done is not None:
            return done
        if key not in tree:
            return expand(b, key)
        node = tree[key]
        total = sum(node["N"])
        scores = [
            (w / n if n else 0.0) + c_puct * p * (math.sqrt(max(total, 1)) / (1.0 + n))
            for p, n, w in zip(node["P"], node["N"], node["W"], strict=True)
        ]
        i = mate_of[key] if key in mate_of else scores.index(max(scores))
        move = moves_of[key][i]
        b.push(move)
        if b.is_checkmate():
            mate_of.setdefault(key, i)
        value = -simulate(b, (*key, move.uci()))
        b.pop()
        node["N"][i] += 1
        node["W"][i] += value
        return value

    b = board.copy()
    expand(b, ())
    if noise_seed is not None:
        root = tree[()]
        noise = np.random.default_rng(noise_seed).dirichlet(np.full(len(root["P"]), alpha))
        root["P"] = ((1 - eps) * np.array(root["P"]) + eps * noise).tolist()
    for i, move in enumerate(moves_of[()]):
        b.push(move)
        if b.is_checkmate():
            mate_of.setdefault((), i)
        b.pop()
    for _ in range(simulations):
        simulate(b, ())
    return [int(n) for n in tree[()]["N"]]


@pytest.mark.parametrize("fen", [chess.STARTING_FEN, MIDDLEGAME, ENDGAME, MATES_IN_ONE[2][0]])
@pytest.mark.parametrize("noise_seed", [None, 5])
def test_batch_size_one_matches_a_plain_recursive_search(fen: str, noise_seed: int | None) -> None:
    root = Node(chess.Board(fen))
    mcts = BatchedMCTS(WeightedEvaluator(), MCTSConfig(simulations=80, c_puct=1.5))
    seeds = None if noise_seed is None else [noise_seed]
    mcts.search([root], add_noise=noise_seed is not None, seeds=seeds)
    assert root.N.tolist() == reference_search(chess.Board(fen), 80, 1.5, noise_seed)


# --- subtree reuse, temperature, terminal values ----------------------------------------------------


def test_advance_keeps_the_subtree_and_its_visits() -> None:
    evaluator = UniformEvaluator()
    mcts = BatchedMCTS(evaluator, MCTSConfig(simulations=200), seed=0)
    root = Node(chess.Board(ENDGAME))
    mcts.search([root], add_noise=False)
    move = root.best_move()
    i = root.moves.index(move)
    child = root.children[i]
    assert child is not None
    kept = child.N.copy()
    assert int(kept.sum()) == int(root.N[i]) - 1 > 0
    new_root = mcts.advance(root, move)
    assert new_root is child
    np.testing.assert_array_equal(new_root.N, kept)
    assert new_root.board.move_stack == [move]
    calls = evaluator.calls
    mcts.search([new_root], simulations=30)
    assert evaluator.calls == calls + 30  # already expanded: no call for the root
    assert int(new_root.N.sum()) == int(kept.sum()) + 30


def test_advance_to_an_unsearched_move_and_refusing_an_illegal_one() -> None:
    mcts = BatchedMCTS(UniformEvaluator(), MCTSConfig(simulations=4))
    root = Node(chess.Board())
    mcts.search([root])
    unvisited = next(m for m, n in root.visit_counts().items() if n == 0)
    fresh = mcts.advance(root, unvisited)
    assert not fresh.expanded and int(fresh.N.sum()) == 0 and fresh.board.turn == chess.BLACK
    with pytest.raises(ValueError, match="illegal move 'e2e5' in 'rnbqkbnr/"):
        mcts.advance(root, chess.Move.from_uci("e2e5"))


def test_temperature_schedule_samples_then_takes_the_most_visited() -> None:
    mcts = BatchedMCTS(UniformEvaluator(), MCTSConfig(simulations=8, temperature_moves=30), seed=0)
    root = Node(chess.Board())
    root.expand(np.ones(NUM_ACTIONS), 0.0)
    root.N[:] = 0
    root.N[[0, 1, 2]] = [6, 3, 1]
    rng = np.random.default_rng(0)
    picks = [mcts.choose_move(root, move_number=29, rng=rng) for _ in range(3000)]
    freq = [picks.count(root.moves[i]) / 3000 for i in range(3)]
    assert freq == pytest.approx([0.6, 0.3, 0.1], abs=0.03)
    assert {mcts.choose_move(root, move_number=30) for _ in range(20)} == {root.moves[0]}
    # the same generator seed, the same choices
    a = [mcts.choose_move(root, 0, rng=np.random.default_rng(7)) for _ in range(5)]
    b = [mcts.choose_move(root, 0, rng=np.random.default_rng(7)) for _ in range(5)]
    assert a == b
    with pytest.raises(ValueError, match="search it first"):
        mcts.choose_move(Node(chess.Board()), 0)


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        ("3R2k1/5ppp/8/8/8/8/5PPP/6K1 b - - 1 1", -1.0),  # checkmated
        ("7k/5Q2/6K1/8/8/8/8/8 b - - 0 1", 0.0),  # stalemate
        ("7k/8/8/8/8/8/8/K6N w - - 0 1", 0.0),  # insufficient material
        ("7k/8/8/8/8/8/8/K6R w - - 100 80", 0.0),  # fifty moves: claimable
        ("7k/8/8/8/8/8/8/K6R w - - 98 80", None),
        ("6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1", None),
    ],
)
def test_terminal_values(setup: str, expected: float | None) -> None:
    assert terminal_value(chess.Board(setup)) == expected


def test_threefold_repetition_is_a_draw_and_a_terminal_root_is_refused() -> None:
    board = chess.Board()
    for _ in range(2):
        for uci in ["g1f3", "g8f6", "f3g1", "f6g8"]:
            board.push(chess.Move.from_uci(uci))
    assert terminal_value(board) == 0.0
    mcts = BatchedMCTS(UniformEvaluator(), MCTSConfig(simulations=4))
    with pytest.raises(ValueError, match="cannot search a finished game"):
        mcts.search([board])


def test_the_search_scores_repetitions_as_draws() -> None:
    board = chess.Board()
    for uci in ["g1f3", "g8f6", "f3g1", "f6g8", "g1f3", "g8f6", "f3g1"]:
        board.push(chess.Move.from_uci(uci))
    root = Node(board)
    child = root.child(root.moves.index(chess.Move.from_uci("f6g8")))
    assert child.terminal == 0.0


def test_priors_as_dicts_and_without_mass_fall_back_to_uniform() -> None:
    node = Node(chess.Board())
    e4 = chess.Move.from_uci("e2e4")
    node.expand({e4: 3.0, chess.Move.from_uci("d2d4"): 1.0}, 0.5)
    assert node.priors[node.moves.index(e4)] == pytest.approx(0.75) and node.value == 0.5
    other = Node(chess.Board())
    other.expand(np.zeros(NUM_ACTIONS), 0.0)
    assert np.allclose(other.priors, 1 / 20)
    with pytest.raises(ValueError, match="priors must have shape"):
        other.expand(np.zeros(10), 0.0)


def test_config_is_checked() -> None:
    with pytest.raises(ValueError, match="MCTSConfig.simulations must be at least 1, got 0"):
        MCTSConfig(simulations=0)
    with pytest.raises(ValueError, match="dirichlet_eps must be in"):
        MCTSConfig(dirichlet_eps=2.0)


# --- the network as evaluator -----------------------------------------------------------------------


def test_network_evaluator_masks_illegal_moves_and_batches_all_games() -> None:
    torch.manual_seed(0)
    net = PolicyValueNet(NetConfig(blocks=1, channels=8, history=2, value_hidden=8))
    evaluator = NetworkEvaluator(net)
    boards = [chess.Board(f) for f, _ in MATES_IN_ONE]
    priors, values = evaluator.evaluate(boards)
    for board, p, v in zip(boards, priors, values, strict=True):
        assert set(np.flatnonzero(p).tolist()) == set(np.flatnonzero(legal_mask(board)).tolist())
        assert float(p.sum()) == pytest.approx(1.0, abs=1e-5) and -1 <= v <= 1
    evaluator.calls = 0
    mcts = BatchedMCTS(evaluator, MCTSConfig(simulations=12), seed=0)
    roots = [Node(chess.Board()) for _ in range(3)]
    pis = mcts.search(roots, seeds=[1, 2, 3])
    assert evaluator.calls == 1 + 12
    assert all(int(r.N.sum()) == 12 for r in roots)
    assert all(np.all(pi[~legal_mask(chess.Board())] == 0) for pi in pis)
    with pytest.raises(ValueError, match="history 3 does not match"):
        NetworkEvaluator(net, history=3)


def test_priors_are_the_softmax_of_the_legal_logits_and_the_search_gets_them_per_move() -> None:
    torch.manual_seed(1)
    net = PolicyValueNet(NetConfig(blocks=1, channels=8, history=2, value_hidden=8)).eval()
    evaluator = NetworkEvaluator(net)
    boards = [chess.Board(f) for f, _ in MATES_IN_ONE] + [chess.Board()]
    logits, _ = net.predict(encode_boards(boards, 2))
    priors, _ = evaluator.evaluate(boards)
    for board, row, p in zip(boards, logits, priors, strict=True):
        actions = legal_indices(board)[1]
        expected = torch.softmax(torch.from_numpy(row[actions]).double(), dim=0).numpy()
        np.testing.assert_allclose(p[actions], expected, rtol=1e-5)
    # the search stores the same priors, per legal move, through evaluate_legal
    mcts = BatchedMCTS(evaluator, MCTSConfig(simulations=1), seed=0)
    roots = [Node(b.copy()) for b in boards]
    mcts.search(roots, add_noise=False)
    for root, p in zip(roots, priors, strict=True):
        np.testing.assert_allclose(root.priors, p[root.actions], rtol=1e-5)
    with pytest.raises(ValueError, match="expected 20 priors"):
        Node(chess.Board()).set_priors(np.ones(3) / 3, 0.0)
    # a finished game gets no priors but a value; NaN priors fall back to uniform
    mated = chess.Board("7k/6Q1/6K1/8/8/8/8/8 b - - 0 1")
    priors, values = evaluator.evaluate([mated, chess.Board()])
    assert float(priors[0].sum()) == 0.0 and float(priors[1].sum()) == pytest.approx(1.0, abs=1e-5)
    assert len(values) == 2
    node = Node(chess.Board())
    node.set_priors(np.full(20, np.nan), 0.0)
    np.testing.assert_allclose(node.priors, np.full(20, 0.05))
