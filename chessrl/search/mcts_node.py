"""A node of a :class:`~chessrl.search.mcts.BatchedMCTS` search tree: :class:`Node`, a handle on a
row of a :class:`~chessrl.search.mcts_tree.ArrayTree` (its moves, priors, visit counts and values, the
move it chose and its policy target), and how an evaluator's :data:`Priors` become a node's.

>>> node = Node(chess.Board("6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1"))
>>> node.moves[node.find_mate()].uci(), node.expanded
('d1d8', False)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TypeAlias

import chess
import numpy as np

from chessrl.search import gumbel, mcts_native
from chessrl.search.board_encoding import NUM_ACTIONS
from chessrl.search.mcts_config import MCTSConfig
from chessrl.search.mcts_leaves import ensure_edges, make_child, new_node
from chessrl.search.mcts_tree import ArrayTree, puct_pick
from chessrl.search.search_board import may_check

__all__ = ["Node", "Priors", "normalised_priors"]

#: An evaluator's prior for one position: a ``(NUM_ACTIONS,)`` array indexed like
#: :mod:`chessrl.search.board_encoding`, or a mapping from moves to priors. Either is renormalised over
#: the legal moves (uniform when it puts no mass on them).
Priors: TypeAlias = np.ndarray | Mapping[chess.Move, float]


def _or_none(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def normalised_priors(priors: Priors, moves: list[chess.Move], actions: np.ndarray) -> np.ndarray:
    """An evaluator's priors gathered on the legal moves and renormalised (uniform without mass)."""
    if isinstance(priors, np.ndarray):
        if priors.shape != (NUM_ACTIONS,):
            raise ValueError(f"priors must have shape ({NUM_ACTIONS},), got {priors.shape}")
        p = priors[actions].astype(np.float64)
    else:
        p = np.array([float(priors.get(m, 0.0)) for m in moves], dtype=np.float64)
    total = float(p.sum())
    return p / total if total > 0 and math.isfinite(total) else np.full(len(p), 1.0 / len(p))


class Node:
    """A position in a search tree: its legal moves and their action indices (computed once),
    and per move the prior ``P``, visit count ``N`` and total value ``W`` (from the side to move
    here). Children are created when the search first walks into them.

    A node is a handle on a row of an :class:`~chessrl.search.mcts_tree.ArrayTree` (``N``, ``W``,
    ``Q``, ``priors`` are writable views into its arrays, valid until the next search grows
    them); a new node gets a tree of its own, and a search moves it into the searcher's tree.

    >>> node = Node(chess.Board())
    >>> len(node.moves), node.expanded, node.terminal
    (20, False, None)
    """

    __slots__ = ("__weakref__", "_id", "_tree")

    def __init__(self, board: chess.Board) -> None:
        tree = ArrayTree(1, 64)
        self._tree = tree
        self._id = new_node(tree, board)
        tree.handles[self._id] = self

    @classmethod
    def _of(cls, tree: ArrayTree, i: int) -> Node:
        """The handle of node ``i`` of ``tree`` (the same object while it lives)."""
        handle = tree.handles.get(i)
        if handle is None:
            handle = object.__new__(cls)
            handle._tree = tree
            handle._id = i
            tree.handles[i] = handle
        return handle

    def _listed(self) -> ArrayTree:
        """The node's tree, with this node's moves listed (on first use)."""
        tree = self._tree
        if not tree.ready[self._id]:
            ensure_edges(tree, np.array([self._id]))
        return tree

    @property
    def _edges(self) -> slice:
        return self._listed().edges(self._id)

    @property
    def board(self) -> chess.Board:
        """The position, with its move stack (the tree's own copy)."""
        return self._tree.board(self._id)

    @property
    def moves(self) -> list[chess.Move]:
        """Legal moves, in python-chess's order."""
        return self._listed().move_list(self._id)

    @property
    def actions(self) -> np.ndarray:
        """Their action indices (``int64``, read-only)."""
        actions = self._tree.action[self._edges]
        actions.flags.writeable = False
        return actions

    @property
    def terminal(self) -> float | None:
        """Exact value for the side to move when the game is over here, else None."""
        return _or_none(self._tree.terminal[self._id])

    @property
    def value(self) -> float | None:
        """The evaluator's value for the side to move, once expanded."""
        return _or_none(self._tree.value[self._id])

    @property
    def priors(self) -> np.ndarray:
        return self._tree.P[self._edges]

    @property
    def noisy_priors(self) -> np.ndarray | None:
        """The priors with Dirichlet noise, used instead of ``priors`` while this node is a root."""
        return self._tree.Psel[self._edges] if self._tree.noisy[self._id] else None

    @noisy_priors.setter
    def noisy_priors(self, priors: np.ndarray | None) -> None:
        tree, edges = self._tree, self._edges
        tree.Psel[edges] = tree.P[edges] if priors is None else priors
        tree.noisy[self._id] = priors is not None

    @property
    def N(self) -> np.ndarray:  # noqa: N802
        return self._tree.N[self._edges]

    @property
    def W(self) -> np.ndarray:  # noqa: N802
        return self._tree.W[self._edges]

    @property
    def Q(self) -> np.ndarray:  # noqa: N802
        """``W / N`` per move, 0 where ``N`` is 0 (kept up to date with ``N`` and ``W``)."""
        return self._tree.Q[self._edges]

    @property
    def visits(self) -> int:
        """Visits through this node's moves so far (``N.sum()`` after a search)."""
        return int(self._tree.visits[self._id])

    @property
    def children(self) -> list[Node | None]:
        """The nodes after each move, None where the search never went."""
        tree = self._tree
        return [Node._of(tree, c) if c >= 0 else None for c in tree.child[self._edges].tolist()]

    @property
    def mate_index(self) -> int | None:
        """A move (its position in ``moves``) found to checkmate at once: selected from then on."""
        i = int(self._tree.mate[self._id])
        return None if i < 0 else i

    @mate_index.setter
    def mate_index(self, i: int | None) -> None:
        self._tree.mate[self._id] = -1 if i is None else i

    @property
    def expanded(self) -> bool:
        """Whether the evaluator has given this node its priors and value."""
        return not math.isnan(self._tree.value[self._id])

    def expand(self, priors: Priors, value: float) -> None:
        """Store the evaluator's priors (renormalised over the legal moves) and value."""
        self.set_priors(normalised_priors(priors, self.moves, self.actions), value)

    def set_priors(self, priors: np.ndarray, value: float) -> None:
        """Store priors already given per legal move (aligned with ``moves``, summing to 1) and the
        value: :meth:`expand` without the gather from the whole action space."""
        if priors.shape != (len(self.moves),):
            raise ValueError(
                f"expected {len(self.moves)} priors (one per legal move), got shape {priors.shape}"
            )
        if len(priors) and not np.isfinite(priors).all():  # a diverged network: search on uniform priors
            priors = np.full(len(priors), 1.0 / len(priors))
        self._tree.set_priors(np.array([self._id]), priors, np.array([float(value)]))

    def select(self, c_puct: float, fpu_reduction: float | None = None) -> int:
        """The move (its position in ``moves``) with the highest ``Q + U`` (unvisited: ``Q = 0``);
        ties go to the first. A move known to mate is always selected."""
        tree = self._tree
        first = self._edges.start
        return int(puct_pick(tree, np.array([self._id]), c_puct, fpu_reduction)[0] - first)

    def child(self, i: int) -> Node:
        """The node after ``moves[i]``, created on first use."""
        if not 0 <= i < len(self.moves):
            raise IndexError(f"move index {i} out of range for {len(self.moves)} moves")
        return Node._of(self._tree, make_child(self._tree, self._id, i))

    def visit_distribution(self) -> np.ndarray:
        """Visit counts as a float32 ``(NUM_ACTIONS,)`` distribution (zeros before any visit)."""
        pi = np.zeros(NUM_ACTIONS, dtype=np.float32)
        n = self.N
        total = int(n.sum())
        if total:
            pi[self.actions] = n / total
        return pi

    def sparse_visits(self) -> tuple[np.ndarray, np.ndarray]:
        """The visited moves' action indices (int64) and visit shares (float32): the replay
        table's sparse policy target.

        >>> Node(chess.Board()).sparse_visits()
        (array([], dtype=int64), array([], dtype=float32))
        """
        n = self.N
        visited = n > 0
        total = max(int(n.sum()), 1)
        return self.actions[visited], (n[visited] / total).astype(np.float32)

    def improved_policy(self, config: MCTSConfig | None = None) -> np.ndarray:
        """Gumbel search's policy target per legal move: ``softmax(logits + sigma(completed
        Q))`` (see :mod:`chessrl.search.gumbel`), with ``config``'s ``c_visit`` and ``c_scale``.

        >>> node = Node(chess.Board("7k/8/8/8/8/8/8/K7 w - - 0 1"))
        >>> node.set_priors(np.array([0.5, 0.25, 0.25]), 0.0)
        >>> node.improved_policy().round(3).tolist()   # no visits: the priors
        [0.5, 0.25, 0.25]
        """
        cfg = config if config is not None else MCTSConfig()
        tree = self._tree
        e = self._edges
        valid = np.ones((1, e.stop - e.start), dtype=bool)
        return gumbel.improved_policy(
            tree.value[[self._id]],
            tree.Q[e][None],
            tree.N[e][None],
            tree.P[e][None],
            valid,
            cfg.c_visit,
            cfg.c_scale,
        )[0]

    def policy_target(self, config: MCTSConfig | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The replay table's sparse policy target: :meth:`sparse_visits` after a PUCT search,
        the :meth:`improved_policy` over every legal move after a Gumbel search."""
        if self._tree.chosen[self._id] < 0 or not self.expanded:
            return self.sparse_visits()
        return self.actions.copy(), self.improved_policy(config).astype(np.float32)

    def visit_counts(self) -> dict[chess.Move, int]:
        """Visits per legal move.

        >>> Node(chess.Board("7k/8/8/8/8/8/8/K7 w - - 0 1")).visit_counts()[chess.Move.from_uci("a1b2")]
        0
        """
        return dict(zip(self.moves, self.N.tolist(), strict=True))

    def find_mate(self) -> int | None:
        """Look at every move that gives check for one that mates at once; remember it in
        ``mate_index`` (a root searched by :class:`BatchedMCTS` never misses a mate in one).

        >>> node = Node(chess.Board("6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1"))
        >>> node.moves[node.find_mate()].uci()
        'd1d8'
        """
        if self.mate_index is None and self._tree.native[self._id] is not None:
            self._edges  # noqa: B018  (lists the moves)
            self.mate_index = mcts_native.first_mate(self._tree, self._id)
        elif self.mate_index is None:
            board = self.board
            for i, move in enumerate(self.moves):
                if may_check(board, move) and board.gives_check(move):
                    board.push(move)
                    mate = board.is_checkmate()
                    board.pop()
                    if mate:
                        self.mate_index = i
                        break
        return self.mate_index

    def best_move(self) -> chess.Move:
        """A move found to mate at once, else the move a Gumbel search chose, else the most
        visited move (the first on ties)."""
        if not self.moves:
            raise ValueError(f"no legal moves in {self.board.fen()!r}")
        if self.mate_index is not None:
            return self.moves[self.mate_index]
        chosen = int(self._tree.chosen[self._id])
        if chosen >= 0:
            return self.moves[chosen]
        return self.moves[int(np.argmax(self.N))]
