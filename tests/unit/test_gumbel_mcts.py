"""Gumbel root search against the paper's definitions (Danihelka et al. 2022; DeepMind's mctx):
sequential halving's visit schedule, the completed Q with the mixed value approximation, sigma,
the improved policy, the root and interior selections, on hand-made trees and positions."""

from __future__ import annotations

import math
from collections.abc import Sequence

import chess
import numpy as np
import pytest

from chessrl.search import gumbel
from chessrl.search.board_encoding import NUM_ACTIONS
from chessrl.search.mcts import BatchedMCTS, MCTSConfig, Node, UniformEvaluator

MATE = ("6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1", "d1d8")
MIDDLEGAME = "r1bqkb1r/pppp1ppp/2n2n2/4p3/2B1P3/5N2/PPPP1PPP/RNBQK2R w KQkq - 4 4"


# --- sequential halving ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("m", "n", "expected"),
    [
        # log2(16) = 4 phases over 32 simulations: 16 moves once, 8 once more, 4 twice more
        (16, 32, (0,) * 16 + (1,) * 8 + (2,) * 4 + (3,) * 4),
        # 4 moves: a phase of 2 rounds of 4, then the best 2 share the rest
        (4, 16, (0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5)),
        # 3 moves: 1 round of 3 (int(10 / (2 * 3)) = 1), then 2 moves, 2 rounds per phase
        (3, 10, (0, 0, 0, 1, 1, 2, 2, 3, 3, 4)),
        (1, 4, (0, 1, 2, 3)),
        (16, 8, (0,) * 8),  # fewer simulations than moves: the first 8 of the Gumbel-top-k
    ],
)
def test_sequential_halving_schedule(m: int, n: int, expected: tuple[int, ...]) -> None:
    assert gumbel.considered_visit_sequence(m, n) == expected


def final_visits(m: int, n: int) -> list[int]:
    """Visits per considered move when every simulation goes to the best of the moves whose
    visits equal the schedule's count, the moves ranked once and for all (0 best)."""
    visits = [0] * m
    for considered in gumbel.considered_visit_sequence(m, n):
        visits[next(i for i in range(m) if visits[i] == considered)] += 1
    return visits


@pytest.mark.parametrize(("m", "n"), [(4, 16), (16, 32), (8, 50), (2, 7), (20, 20)])
def test_a_gumbel_search_shares_its_simulations_by_sequential_halving(m: int, n: int) -> None:
    """Uniform priors, every value 0: sigma(completed Q) is the same for every move, so the
    order is g + logits alone (no noise: the moves' order) and the visits are the schedule's."""
    root = Node(chess.Board())  # 20 moves
    mcts = BatchedMCTS(
        UniformEvaluator(), MCTSConfig(simulations=n, search="gumbel", gumbel_actions=m), seed=0
    )
    mcts.search([root], add_noise=False)
    k = min(m, 20)
    expected = final_visits(k, n)
    assert root.N.tolist() == expected + [0] * (20 - k)
    assert int(root.N.sum()) == n
    # the move chosen: the best (first) of the most visited
    assert root.best_move() == root.moves[0]


def test_gumbel_noise_picks_the_considered_moves_by_gumbel_top_k() -> None:
    root = Node(chess.Board())
    mcts = BatchedMCTS(
        UniformEvaluator(), MCTSConfig(simulations=8, search="gumbel", gumbel_actions=4), seed=0
    )
    mcts.search([root], seeds=[7])
    g = np.random.default_rng(7).gumbel(size=20)  # the root's noise, drawn as the search draws it
    top4 = np.argsort(-(g + np.log(1 / 20)), kind="stable")[:4]
    assert sorted(np.flatnonzero(root.N).tolist()) == sorted(top4.tolist())
    assert root.N[top4].tolist() == final_visits(4, 8) == [3, 3, 1, 1]  # the best 2 of them go on


# --- completed Q, sigma, the improved policy ----------------------------------------------------


def hand_node() -> tuple[np.ndarray, ...]:
    """One node, three moves: Q = (0.2, -0.4, -), N = (2, 1, 0), priors (0.5, 0.3, 0.2), v = 0.5."""
    q = np.array([[0.2, -0.4, 0.0]])
    n = np.array([[2, 1, 0]])
    prior = np.array([[0.5, 0.3, 0.2]])
    return np.array([0.5]), q, n, prior, np.ones((1, 3), dtype=bool)


def test_mixed_value_and_completed_q_by_hand() -> None:
    v, q, n, prior, valid = hand_node()
    # (v + sum N * sum_visited pi Q / sum_visited pi) / (1 + sum N)
    weighted = (0.5 * 0.2 + 0.3 * -0.4) / (0.5 + 0.3)
    mixed = (0.5 + 3 * weighted) / (1 + 3)
    assert mixed == pytest.approx(0.10625)
    assert gumbel.mixed_value(v, q, n, prior, valid)[0] == pytest.approx(mixed)
    np.testing.assert_allclose(gumbel.completed_q(v, q, n, prior, valid)[0], [0.2, -0.4, mixed])
    # no visit at all: the network's value
    assert gumbel.mixed_value(v, q, np.zeros_like(n), prior, valid)[0] == pytest.approx(0.5)


def test_sigma_and_the_improved_policy_by_hand() -> None:
    v, q, n, prior, valid = hand_node()
    cq = gumbel.completed_q(v, q, n, prior, valid)
    # rescaled to [0, 1] by min -0.4 and max 0.2, times (c_visit + max N) * c_scale = (50 + 2) * 1
    q01 = np.array([1.0, 0.0, (0.10625 + 0.4) / 0.6])
    np.testing.assert_allclose(gumbel.sigma(cq, n, valid, 50.0, 1.0)[0], 52 * q01)
    np.testing.assert_allclose(gumbel.sigma(cq, n, valid, 10.0, 0.1)[0], 12 * 0.1 * q01)
    logits = np.log(prior[0]) + 52 * q01
    expected = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    np.testing.assert_allclose(gumbel.improved_policy(v, q, n, prior, valid)[0], expected)
    # interior selection: pi'(a) - N(a) / (1 + sum N)
    np.testing.assert_allclose(
        gumbel.interior_scores(v, q, n, prior, valid)[0], expected - np.array([2, 1, 0]) / 4
    )


def test_root_scores_only_for_the_considered_moves() -> None:
    v, q, n, prior, valid = hand_node()
    gl = np.array([[0.3, 2.0, -1.0]])
    s = gumbel.sigma(gumbel.completed_q(v, q, n, prior, valid), n, valid)
    scores = gumbel.root_scores(gl, np.array([1]), n, v, q, n, prior, valid)
    assert scores[0, 1] == pytest.approx(gl[0, 1] + s[0, 1]) and np.isneginf(scores[0, [0, 2]]).all()
    scores = gumbel.root_scores(gl, np.array([0]), n, v, q, n, prior, valid)
    assert np.isneginf(scores[0, :2]).all() and scores[0, 2] == pytest.approx(gl[0, 2] + s[0, 2])


def test_padding_is_ignored() -> None:
    v, q, n, prior, _ = hand_node()
    pad = lambda a, x: np.concatenate([a, np.full((1, 2), x)], axis=1)  # noqa: E731
    valid = np.array([[True, True, True, False, False]])
    pq, pn, pp = pad(q, 9.0), pad(n, 99), pad(prior, 0.9)
    np.testing.assert_allclose(
        gumbel.improved_policy(v, pq, pn, pp, valid)[0, :3],
        gumbel.improved_policy(v, q, n, prior, np.ones((1, 3), bool))[0],
    )
    assert (gumbel.improved_policy(v, pq, pn, pp, valid)[0, 3:] == 0).all()


# --- the search -------------------------------------------------------------------------------


class ValueByMove:
    """Uniform priors; a position's value (for its side to move) set by the last move played."""

    def __init__(self, values: dict[str, float]) -> None:
        self.values = values
        self.calls = 0

    def evaluate(self, boards: Sequence[chess.Board]) -> tuple[list[dict[chess.Move, float]], list[float]]:
        self.calls += 1
        priors = [{m: 1.0 for m in b.legal_moves} for b in boards]
        return priors, [self.values.get(b.peek().uci(), 0.0) if b.move_stack else 0.0 for b in boards]


def test_the_search_returns_the_improved_policy_and_plays_its_choice() -> None:
    # after e2e4 the opponent (to move) stands badly: e2e4 is good for white; after g1h3 black stands well
    evaluator = ValueByMove({"e2e4": -0.8, "g1h3": 0.6})
    cfg = MCTSConfig(simulations=40, search="gumbel", gumbel_actions=20)
    mcts = BatchedMCTS(evaluator, cfg, seed=0)
    root = Node(chess.Board())
    [pi] = mcts.search([root], add_noise=False)
    e4 = root.moves.index(chess.Move.from_uci("e2e4"))
    h3 = root.moves.index(chess.Move.from_uci("g1h3"))
    assert root.best_move().uci() == "e2e4" and mcts.choose_move(root, 0).uci() == "e2e4"
    assert root.N[e4] == root.N.max()
    # the policy: softmax(logits + sigma(completed Q)) from the root's own numbers
    n, q, p = root.N[None], root.Q[None], root.priors[None]
    expected = gumbel.improved_policy(np.array([root.value]), q, n, p, np.ones_like(n, dtype=bool))[0]
    np.testing.assert_allclose(pi[root.actions], expected, rtol=1e-6)
    assert pi.shape == (NUM_ACTIONS,) and float(pi.sum()) == pytest.approx(1.0)
    assert pi[root.actions[e4]] > 0.5 and pi[root.actions[h3]] < 1 / 20
    indices, probs = root.policy_target(cfg)
    np.testing.assert_array_equal(indices, root.actions)
    np.testing.assert_allclose(probs, expected, rtol=1e-6)


def test_gumbel_finds_mate_in_one_and_batched_equals_alone() -> None:
    cfg = MCTSConfig(simulations=16, search="gumbel", gumbel_actions=8)
    root = Node(chess.Board(MATE[0]))
    [pi] = BatchedMCTS(UniformEvaluator(), cfg, seed=0).search([root])
    assert root.best_move().uci() == MATE[1] and int(np.argmax(pi)) == int(root.actions[root.mate_index])
    fens = [chess.STARTING_FEN, MIDDLEGAME, MATE[0]]
    together = [Node(chess.Board(f)) for f in fens]
    pis = BatchedMCTS(ValueByMove({"e2e4": -0.5}), cfg, seed=0).search(together, seeds=[1, 2, 3])
    for i, fen in enumerate(fens):
        alone = Node(chess.Board(fen))
        [p] = BatchedMCTS(ValueByMove({"e2e4": -0.5}), cfg, seed=5).search([alone], seeds=[i + 1])
        np.testing.assert_array_equal(alone.N, together[i].N)
        np.testing.assert_array_equal(p, pis[i])
        assert alone.best_move() == together[i].best_move()


def test_below_the_root_the_selection_is_deterministic() -> None:
    """Two searches with different root noise agree on every interior node they share."""
    cfg = MCTSConfig(simulations=30, search="gumbel", gumbel_actions=2)
    roots = []
    for seed in (1, 2):
        root = Node(chess.Board(MIDDLEGAME))
        BatchedMCTS(ValueByMove({}), cfg, seed=0).search([root], seeds=[seed])
        roots.append(root)
    assert roots[0].N.tolist() != roots[1].N.tolist()
    for i in set(np.flatnonzero(roots[0].N)) & set(np.flatnonzero(roots[1].N)):
        a, b = roots[0].children[i], roots[1].children[i]
        if roots[0].N[i] == roots[1].N[i]:
            np.testing.assert_array_equal(a.N, b.N)


def test_gumbel_in_self_play_and_the_config_is_checked() -> None:
    from chessrl.search.selfplay import SelfPlay, SelfPlaySettings

    sp = SelfPlay(
        UniformEvaluator(),
        MCTSConfig(simulations=8, search="gumbel", gumbel_actions=4),
        SelfPlaySettings(concurrent_games=2, max_plies=4, history=1),
        seed=0,
    )
    games = sp.play(2)
    for game in games:
        for pos in game.positions:
            assert float(pos.policy_probs.sum()) == pytest.approx(1.0, abs=1e-5)
            assert len(pos.policy_indices) == len(pos.policy_probs) >= 8  # every legal move
    with pytest.raises(ValueError, match="search must be 'puct' or 'gumbel'"):
        MCTSConfig(search="alphazero")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="gumbel_actions must be at least 1"):
        MCTSConfig(gumbel_actions=0)
    assert math.isclose(MCTSConfig().c_visit, 50.0) and MCTSConfig().c_scale == 1.0
