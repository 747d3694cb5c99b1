"""The search on native boards gives python-chess's answers: planes, end-of-game values, moves and
boards of every node of real trees (with repetitions in the game and along the tree), across
advances and compactions; chess960 and the switch fall back to python-chess."""

from __future__ import annotations

import math

import chess
import numpy as np
import pytest
import torch

from chessrl.search import mcts_leaves, mcts_native
from chessrl.search.board_encoding import encode_boards, move_to_index
from chessrl.search.mcts import BatchedMCTS, MCTSConfig, NetworkEvaluator, Node, UniformEvaluator
from chessrl.search.network import NetConfig, PolicyValueNet
from chessrl.search.search_board import terminal_value

SHUFFLE = ["g1f3", "g8f6", "f3g1", "f6g8"]


def _board(fen: str | None = None, moves: list[str] = ()) -> chess.Board:  # type: ignore[assignment]
    board = chess.Board(fen) if fen else chess.Board()
    for uci in moves:
        board.push_uci(uci)
    return board


STARTS = [
    _board(),
    _board(moves=SHUFFLE),  # the start position seen before: twice more ends the game
    _board(moves=["e2e4", "g8f6", "e4e5", "d7d5"]),  # en passant on d6
    _board("r3k2r/pppq1ppp/2n2n2/3pp3/1b1PP3/2N2N2/PPPQ1PPP/R3K2R w KQkq - 4 8", ["e1g1", "e8c8"]),
    _board("8/P5k1/8/8/8/8/6Kp/8 w - - 0 60", ["a7a8q", "h2h1n"]),  # promotions
    _board("7k/5Q2/8/8/8/8/8/K7 w - - 96 120", ["f7f6", "h8h7"]),  # clock 98: children claim fifty moves
]


@pytest.fixture(scope="module")
def net() -> PolicyValueNet:
    torch.manual_seed(0)
    return PolicyValueNet(NetConfig(blocks=1, channels=8, history=4, value_hidden=8)).eval()


def _check(tree) -> int:  # noqa: ANN001
    """Every native node of ``tree`` against python-chess; returns how many are finished games."""
    ids = np.array([i for i in range(tree.n_nodes) if tree.native[i] is not None])
    assert len(ids) > 100
    boards = [tree.board(i) for i in ids.tolist()]
    for history in (1, 2, 4):
        assert np.array_equal(mcts_native.planes(tree, ids, history), encode_boards(boards, history))
    finished = 0
    for i, board in zip(ids.tolist(), boards, strict=True):
        expected = terminal_value(board)
        got = None if math.isnan(tree.terminal[i]) else float(tree.terminal[i])
        assert got == expected, board.fen()
        finished += got is not None
        if tree.ready[i]:
            moves = tree.move_list(i)
            assert set(moves) == set(board.legal_moves)
            assert tree.action[tree.edges(i)].tolist() == [move_to_index(board, m) for m in moves]
    return finished


def test_native_nodes_give_python_chess_planes_values_and_moves(net: PolicyValueNet) -> None:
    mcts = BatchedMCTS(NetworkEvaluator(net), MCTSConfig(simulations=48, leaves_per_game=2), seed=3)
    roots = [Node(b.copy()) for b in STARTS]
    mcts.search(roots)
    assert _check(mcts.tree) >= 10  # repetitions, mates and the fifty-move claim were met
    for _ in range(2):  # advance and search on: the subtree is kept, the old root let go
        roots = [BatchedMCTS.advance(r, r.best_move()) for r in roots]
        roots = [r for r in roots if r.terminal is None]
        mcts.search(roots)
    mcts.tree.compact()
    _check(mcts.tree)


def test_roots_boards_follow_the_game_across_advances_and_compaction() -> None:
    mcts = BatchedMCTS(UniformEvaluator(), MCTSConfig(simulations=12), seed=0)
    start = _board(moves=SHUFFLE)
    root = Node(start.copy())
    game = start.copy()
    for _ in range(6):
        mcts.search([root])
        move = root.best_move()
        game.push(move)
        root = BatchedMCTS.advance(root, move)
        mcts.tree.compact()
        assert root.board.move_stack == game.move_stack and root.board.fen() == game.fen()
        assert root.terminal == terminal_value(game)
        if root.terminal is not None:
            break


def test_the_switch_and_chess960_take_python_chess(monkeypatch: pytest.MonkeyPatch) -> None:
    board960 = chess.Board.from_chess960_pos(100)
    node = Node(board960)
    assert node._tree.native[node._id] is None
    monkeypatch.setattr(mcts_leaves, "NATIVE_BOARDS", False)
    mcts = BatchedMCTS(UniformEvaluator(), MCTSConfig(simulations=16), seed=0)
    roots = [Node(chess.Board()), Node(board960)]
    mcts.search(roots)
    assert all(x is None for x in mcts.tree.native)
    assert roots[0].visits == 16


def test_a_game_past_the_native_counters_goes_on_in_python_chess() -> None:
    mcts = BatchedMCTS(UniformEvaluator(), MCTSConfig(simulations=8), seed=0)
    root = Node(chess.Board("4k3/8/8/8/8/8/8/R3K3 w - - 0 205"))  # the full-move number near 255
    natives = []
    for _ in range(3):
        natives.append(root._tree.native[root._id] is not None)
        mcts.search([root])
        root = BatchedMCTS.advance(root, root.best_move())
    assert natives[0] and not natives[-1]
    assert root.board.fullmove_number == 206 and root.terminal == terminal_value(root.board)


@pytest.mark.parametrize(
    "config", [MCTSConfig(simulations=40), MCTSConfig(simulations=40, leaves_per_game=3, fpu_reduction=0.2)]
)
def test_a_search_on_native_boards_is_the_python_chess_search_bit_for_bit(
    config: MCTSConfig, net: PolicyValueNet, monkeypatch: pytest.MonkeyPatch
) -> None:
    def run(native: bool) -> list[np.ndarray]:
        monkeypatch.setattr(mcts_leaves, "NATIVE_BOARDS", native)
        mcts = BatchedMCTS(NetworkEvaluator(net), config, seed=5)
        roots = [Node(b.copy()) for b in STARTS]
        stats = []
        for _ in range(3):
            mcts.search(roots)
            stats += [a.copy() for r in roots for a in (r.N, r.W, r.Q, r.priors)]
            roots = [BatchedMCTS.advance(r, mcts.choose_move(r, 0)) for r in roots]
            roots = [r for r in roots if r.terminal is None]
        return stats

    native, python = run(True), run(False)
    assert len(native) == len(python) and all(
        np.array_equal(a, b) for a, b in zip(native, python, strict=True)
    )


def test_the_first_mate_in_one_is_python_chess_s(monkeypatch: pytest.MonkeyPatch) -> None:
    fens = [
        "6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1",  # Rd8#
        "6k1/5ppp/8/8/8/8/1q3PPP/3R2K1 b - - 0 1",  # both sides one move from mate
        "k7/8/1K6/8/8/8/8/7Q w - - 0 1",  # several queen mates
        "4k3/8/4K3/8/8/8/8/R7 w - - 0 1",  # Ra8#
        "rnbqkbnr/pppp1ppp/8/4p3/6P1/5P2/PPPPP2P/RNBQKBNR b KQkq - 0 2",  # Qh4#
        "7k/8/8/8/8/8/8/K7 w - - 0 1",  # none
    ]
    for fen in fens:
        native = Node(chess.Board(fen)).find_mate()
        monkeypatch.setattr(mcts_leaves, "NATIVE_BOARDS", False)
        python = Node(chess.Board(fen)).find_mate()
        monkeypatch.setattr(mcts_leaves, "NATIVE_BOARDS", True)
        assert native == python, fen
    assert (
        Node(chess.Board(fens[0])).find_mate() is not None and Node(chess.Board(fens[-1])).find_mate() is None
    )


def test_games_the_native_board_cannot_replay_take_python_chess() -> None:
    nulls = chess.Board()
    nulls.push(chess.Move.null())
    nulls.push(chess.Move.null())  # no move for the compiled board (and one would abort rust_chess)
    node = Node(nulls)
    assert node._tree.native[node._id] is None
    BatchedMCTS(UniformEvaluator(), MCTSConfig(simulations=8)).search([node])
    assert node.visits == 8


def test_a_game_through_an_invalid_position_is_native() -> None:
    """A game whose earlier position python-chess calls invalid (rust_chess refused it): the
    compiled board replays it, and the repetition keys come out as python-chess's."""
    board = chess.Board("4k3/8/8/8/8/8/8/4R1K1 w - - 0 1")  # black in check, white to move
    for uci in ["e1a1", "e8d7", "g1h1", "d7e8", "h1g1"]:  # back to the position after the first move
        board.push_uci(uci)
    node = Node(board)
    assert node._tree.native[node._id] is True
    tree = node._tree
    assert int(tree.rep[node._id]) == 1 and board.is_repetition(2) and not board.is_repetition(3)
    BatchedMCTS(UniformEvaluator(), MCTSConfig(simulations=8)).search([node])
    assert node.visits == 8


def test_an_evaluator_that_changes_evaluate_logits_sees_the_boards(net: PolicyValueNet) -> None:
    seen: list[chess.Board] = []

    class Logged(NetworkEvaluator):
        def evaluate_logits(self, boards):  # type: ignore[no-untyped-def]
            seen.extend(boards)
            return super().evaluate_logits(boards)

    BatchedMCTS(Logged(net), MCTSConfig(simulations=8)).search([Node(chess.Board())])
    assert len(seen) == 9 and all(isinstance(b, chess.Board) for b in seen)  # the root and 8 leaves


def test_a_root_given_twice_is_refused() -> None:
    root = Node(chess.Board())
    with pytest.raises(ValueError, match="twice"):
        BatchedMCTS(UniformEvaluator(), MCTSConfig(simulations=4)).search([root, root])


def test_kernels_compile_without_a_cache_where_none_can_be_written(monkeypatch: pytest.MonkeyPatch) -> None:
    import numba

    from chessrl.search import compiled

    real = numba.njit

    def no_cache(*args, **kwargs):  # type: ignore[no-untyped-def]
        if kwargs.get("cache"):
            raise RuntimeError("cannot cache function 'f': no locator available for file 'x.py'")
        return real(*args, **kwargs)

    monkeypatch.setattr(numba, "njit", no_cache)

    @compiled.jit
    def add(a: int, b: int) -> int:
        return a + b

    assert add(2, 3) == 5
