"""PUCT Monte Carlo tree search over many games at once, AlphaZero-style (or Gumbel root search).

:class:`BatchedMCTS` searches one tree per game. Each round it walks every game's tree from the
root to a leaf (``leaves_per_game`` leaves per game, spread by virtual loss), sends the leaves of
*all* games to the evaluator in *one* call, expands them and backs their values up. Terminal
positions are scored exactly and never sent to the evaluator. After a move,
:meth:`BatchedMCTS.advance` keeps the subtree.

The trees live in flat arrays (:class:`chessrl.search.mcts_tree.ArrayTree`): a PUCT round walks every
game to a leaf and backs it up in compiled code (:mod:`chessrl.search.mcts_compiled`; the NumPy
version, a few array operations per tree level for all games, is the reference and Gumbel's),
and :class:`Node` is a handle on a row. A standard game's nodes keep native boards
(:mod:`chessrl.search.mcts_native`: the same moves, in python-chess's order, and the same answers).
A leaf's legal moves are listed only when a search first walks through it; until then it keeps its row of the network's logits (a leaf's end of game is found
without listing its moves). ``MCTSConfig(search="gumbel")`` is Gumbel root search
(:mod:`chessrl.search.gumbel`).

>>> mcts = BatchedMCTS(UniformEvaluator(), MCTSConfig(simulations=40), seed=0)
>>> root = Node(chess.Board("6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1"))   # Rd8 mates
>>> [pi] = mcts.search([root], add_noise=False)
>>> root.best_move().uci(), int(root.N.sum()), round(float(pi.sum()), 6)
('d1d8', 40, 1.0)
>>> mcts.evaluator_calls    # the root only: the root's mate in one is found before any simulation
1

Games are searched side by side; each game's tree and random numbers (a seed per root) are its
own, so a game searched in a batch gets the same visit counts as searched alone:

>>> roots = [Node(chess.Board()), Node(chess.Board("4k3/8/8/8/8/8/4P3/4K3 w - - 0 1"))]
>>> pis = BatchedMCTS(UniformEvaluator(), MCTSConfig(simulations=8), seed=0).search(roots, seeds=[1, 2])
>>> [pi] = BatchedMCTS(UniformEvaluator(), MCTSConfig(simulations=8), seed=0).search(
...     [Node(chess.Board())], seeds=[1])
>>> bool((pis[0] == pi).all())
True
>>> calls = UniformEvaluator()
>>> _ = BatchedMCTS(calls, MCTSConfig(simulations=8)).search([Node(chess.Board()) for _ in range(5)])
>>> calls.calls, calls.positions     # one call for the 5 roots, then one per round: 5 leaves
(9, 45)

Values are from the side to move, in ``[-1, 1]``; a checkmated side to move scores -1 and every
draw 0 (``board.outcome(claim_draw=False)``, plus a threefold repetition or a fifty-move claim).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypeAlias

import chess
import numpy as np

from chessrl.search import gumbel, mcts_compiled, mcts_native, native_board
from chessrl.search.board_encoding import NUM_ACTIONS, copy_board, encode_boards, legal_indices, legal_mask
from chessrl.search.mcts_leaves import (
    ensure_edges,
    ensure_edges_one,
    finite_priors,
    legal_softmax,
    make_child,
    new_node,
)
from chessrl.search.mcts_tree import ArrayTree, padded_edges, puct_pick, puct_pick_one
from chessrl.search.network import PolicyValueNet
from chessrl.search.search_board import may_check, terminal_value

__all__ = [
    "BatchedMCTS",
    "Evaluator",
    "MCTSConfig",
    "NetworkEvaluator",
    "Node",
    "Priors",
    "UniformEvaluator",
    "terminal_value",
]

#: An evaluator's prior for one position: a ``(NUM_ACTIONS,)`` array indexed like
#: :mod:`chessrl.search.board_encoding`, or a mapping from moves to priors. Either is renormalised over
#: the legal moves (uniform when it puts no mass on them).
Priors: TypeAlias = np.ndarray | Mapping[chess.Move, float]

_TINY = float(np.finfo(np.float64).tiny)


class Evaluator(Protocol):
    """Priors and values for a batch of positions: one call per batch of leaves."""

    def evaluate(self, boards: Sequence[chess.Board]) -> tuple[Sequence[Priors], Sequence[float]]:
        """Per board: priors over its moves, and its value from the side to move, in [-1, 1].
        The boards belong to the search tree and must not be changed."""
        ...


@dataclass(frozen=True)
class MCTSConfig:
    """Search settings (AlphaZero's values, except the number of simulations)."""

    #: Simulations (leaf evaluations or terminal visits) per root and search.
    simulations: int = 64
    #: Exploration constant of PUCT: ``Q + c_puct * P * sqrt(N_parent) / (1 + N)``.
    c_puct: float = 1.5
    #: Concentration of the Dirichlet noise mixed into the root's priors.
    dirichlet_alpha: float = 0.3
    #: Weight of that noise: ``(1 - eps) * P + eps * Dir(alpha)``.
    dirichlet_eps: float = 0.25
    #: Loss counted on an edge while a leaf below it waits for its evaluation.
    virtual_loss: float = 1.0
    #: Leaves gathered per game per round (virtual loss spreads them when more than 1; a leaf
    #: reached twice in a round is evaluated once and counts as two simulations).
    leaves_per_game: int = 1
    #: First-play urgency: None scores an unvisited move 0, as AlphaZero; a number scores it as the
    #: node's mean value so far minus this (Leela Chess Zero's "FPU reduction"), so that a winning
    #: side still tries new moves instead of only the first ones it saw.
    fpu_reduction: float | None = None
    #: Plies (from the game's start) whose move is sampled from the visit counts; argmax after.
    temperature_moves: int = 30
    #: Temperature of that sampling: probabilities proportional to ``N ** (1 / temperature)``.
    temperature: float = 1.0
    #: ``puct``: AlphaZero's search (above). ``gumbel``: Gumbel root search (Danihelka et al.
    #: 2022, as mctx): ``gumbel_actions`` root moves sampled by Gumbel-top-k, sequential halving
    #: over the simulations, the deterministic selection below the root, and the improved policy
    #: ``softmax(logits + sigma(completed Q))`` as the policy target (see :mod:`chessrl.search.gumbel`);
    #: the root's noise is Gumbel noise, not Dirichlet, and the move played is the search's choice.
    #: The halving schedule counts this search's visits; a kept subtree's earlier visits still
    #: count in Q and sigma.
    search: Literal["puct", "gumbel"] = "puct"
    #: Gumbel: root moves considered (``m``; fewer when fewer are legal).
    gumbel_actions: int = 16
    #: Gumbel: ``sigma(q) = (c_visit + max_b N(b)) * c_scale * q``, q rescaled to [0, 1].
    c_visit: float = 50.0
    c_scale: float = 1.0

    def __post_init__(self) -> None:
        if self.search not in ("puct", "gumbel"):
            raise ValueError(f"MCTSConfig.search must be 'puct' or 'gumbel', got {self.search!r}")
        for name in ("simulations", "leaves_per_game", "gumbel_actions"):
            if getattr(self, name) < 1:
                raise ValueError(f"MCTSConfig.{name} must be at least 1, got {getattr(self, name)!r}")
        for name in ("c_puct", "dirichlet_alpha", "temperature", "c_scale"):
            if not getattr(self, name) > 0:
                raise ValueError(f"MCTSConfig.{name} must be positive, got {getattr(self, name)!r}")
        if not 0 <= self.dirichlet_eps <= 1:
            raise ValueError(f"MCTSConfig.dirichlet_eps must be in [0, 1], got {self.dirichlet_eps!r}")
        if self.virtual_loss < 0 or self.temperature_moves < 0 or self.c_visit < 0:
            raise ValueError("MCTSConfig.virtual_loss, temperature_moves and c_visit must not be negative")


@functools.cache
def _planes_follow_logits(cls: type) -> bool:
    """Whether ``cls.evaluate_planes`` comes from where ``cls.evaluate_logits`` does, or below:
    then encoding the planes itself and calling ``evaluate_planes`` is ``evaluate_logits``."""

    def owner(name: str) -> type:
        return next(c for c in cls.__mro__ if name in c.__dict__)

    return issubclass(owner("evaluate_planes"), owner("evaluate_logits"))


def _or_none(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def _normalised(priors: Priors, moves: list[chess.Move], actions: np.ndarray) -> np.ndarray:
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

    @property
    def _edges(self) -> slice:
        tree = self._tree
        if not tree.ready[self._id]:
            ensure_edges(tree, np.array([self._id]))
        return tree.edges(self._id)

    @property
    def board(self) -> chess.Board:
        """The position, with its move stack (the tree's own copy)."""
        return self._tree.board(self._id)

    @property
    def moves(self) -> list[chess.Move]:
        """Legal moves, in python-chess's order."""
        tree = self._tree
        if not tree.ready[self._id]:
            ensure_edges(tree, np.array([self._id]))
        return tree.move_list(self._id)

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
        self.set_priors(_normalised(priors, self.moves, self.actions), value)

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
            tree.value[[self._id]], tree.Q[e][None], tree.N[e][None], tree.P[e][None], valid,
            cfg.c_visit, cfg.c_scale,
        )[0]  # fmt: skip

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


class UniformEvaluator:
    """Uniform priors over the legal moves and a constant value; counts its calls and positions.

    >>> ev = UniformEvaluator()
    >>> priors, values = ev.evaluate([chess.Board()])
    >>> round(float(priors[0].sum()), 6), values, ev.calls, ev.positions
    (1.0, [0.0], 1, 1)
    """

    def __init__(self, value: float = 0.0) -> None:
        self.value = value
        #: Calls to :meth:`evaluate` so far.
        self.calls = 0
        #: Positions evaluated so far.
        self.positions = 0

    def evaluate(self, boards: Sequence[chess.Board]) -> tuple[list[np.ndarray], list[float]]:
        self.calls += 1
        self.positions += len(boards)
        priors = []
        for board in boards:
            mask = legal_mask(board).astype(np.float32)
            priors.append(mask / max(float(mask.sum()), 1.0))
        return priors, [self.value] * len(boards)


class NetworkEvaluator:
    """A :class:`~chessrl.search.network.PolicyValueNet` as an evaluator: the boards are encoded and sent
    through the net in one batch; priors are the softmax of the logits over the legal moves.

    >>> from chessrl.search.network import NetConfig
    >>> ev = NetworkEvaluator(PolicyValueNet(NetConfig(blocks=1, channels=8, history=2)))
    >>> priors, values = ev.evaluate([chess.Board(), chess.Board()])
    >>> int((priors[0] > 0).sum()), round(float(priors[0].sum()), 4), ev.calls
    (20, 1.0, 1)
    """

    def __init__(self, net: PolicyValueNet, history: int | None = None) -> None:
        self.net = net
        self.history = net.config.history if history is None else history
        if self.history != net.config.history:
            raise ValueError(
                f"history {self.history} does not match the network's input (history {net.config.history})"
            )
        self.calls = 0
        self.positions = 0

    def evaluate(self, boards: Sequence[chess.Board]) -> tuple[list[np.ndarray], list[float]]:
        actions = [legal_indices(board)[1] for board in boards]
        legal, values = self.evaluate_legal(boards, actions)
        priors = []
        for p_legal, a in zip(legal, actions, strict=True):
            p = np.zeros(NUM_ACTIONS, dtype=np.float32)
            p[a] = p_legal
            priors.append(p)
        return priors, values

    def evaluate_legal(
        self, boards: Sequence[chess.Board], actions: Sequence[np.ndarray]
    ) -> tuple[list[np.ndarray], list[float]]:
        """Priors per legal move (``actions[i]`` are board i's legal action indices, in the order
        of its moves) and values: one network call, and the softmax over every board's legal
        logits in a few array operations.
        """
        flat, value_list = self.evaluate_flat(boards, actions)
        lengths = np.array([len(a) for a in actions], dtype=np.int64)
        ends = np.cumsum(lengths)
        return [flat[e - n : e] for e, n in zip(ends.tolist(), lengths.tolist(), strict=True)], value_list

    def evaluate_flat(
        self, boards: Sequence[chess.Board], actions: Sequence[np.ndarray]
    ) -> tuple[np.ndarray, list[float]]:
        """:meth:`evaluate_legal` with the priors of all boards concatenated (float64, in the
        order of ``actions``; a finished game adds none)."""
        logits, values = self.evaluate_logits(boards)
        flat, _ = legal_softmax(logits, np.arange(len(boards)), actions)
        return flat, values

    def evaluate_logits(self, boards: Sequence[chess.Board]) -> tuple[np.ndarray, list[float]]:
        """The network's raw policy logits ``(len(boards), NUM_ACTIONS)`` and values, in one
        call: :class:`BatchedMCTS` takes the softmax over a position's legal moves only when its
        search first walks through it."""
        return self.evaluate_planes(encode_boards(boards, self.history))

    def evaluate_planes(self, planes: np.ndarray) -> tuple[np.ndarray, list[float]]:
        """:meth:`evaluate_logits` of positions already encoded (``encode_boards``' planes, with
        this evaluator's history): :class:`BatchedMCTS` encodes its native nodes itself."""
        self.calls += 1
        self.positions += len(planes)
        if not len(planes):
            return np.zeros((0, NUM_ACTIONS), dtype=np.float32), []
        logits, values = self.net.predict(planes)  # (B, 4672), (B,)
        return logits, values.astype(np.float64).tolist()


class BatchedMCTS:
    """PUCT (or Gumbel) search over many games' trees, with one evaluator call per round of
    leaves. The trees live in one :class:`~chessrl.search.mcts_tree.ArrayTree` (``self.tree``): each
    round walks every game's tree at once (compiled walks, or a few array operations per level).

    ``seed`` drives the Dirichlet (or Gumbel) noise and move sampling unless a search or a choice
    is given its own seeds or generator.
    """

    #: Compact the tree at a search's start once it holds this many edges or nodes (and twice as
    #: many as after the last compaction): dropped subtrees go, with the rows of network logits
    #: their unvisited leaves keep.
    COMPACT_EDGES = 1 << 16
    COMPACT_NODES = 1 << 11
    #: Search one root alone in scalar steps (:meth:`_simulate_alone`); False: the batch rounds.
    scalar_alone = True
    #: PUCT rounds walk and back up in compiled code (:mod:`chessrl.search.mcts_compiled`); False: the
    #: NumPy array operations per tree level (the reference, bit for bit the same).
    compiled = True

    def __init__(self, evaluator: Evaluator, config: MCTSConfig | None = None, seed: int = 0) -> None:
        self.evaluator = evaluator
        self.config = config if config is not None else MCTSConfig()
        self.rng = np.random.default_rng(seed)
        self.tree = ArrayTree(256, 8192)
        self._compacted_edges = 0
        self._compacted_nodes = 0
        #: Evaluator calls and positions sent so far.
        self.evaluator_calls = 0
        self.positions_evaluated = 0
        #: Simulations run so far, over all roots.
        self.simulations_run = 0

    def search(
        self,
        roots: Sequence[Node | chess.Board],
        *,
        add_noise: bool = True,
        seeds: Sequence[int] | None = None,
        simulations: int | None = None,
    ) -> list[np.ndarray]:
        """Run ``simulations`` (default: the config's) simulations from each root; return each
        root's policy over ``NUM_ACTIONS``: its visit distribution (PUCT) or its improved policy
        (Gumbel). Boards are wrapped in fresh nodes (pass nodes to keep the trees). With
        ``add_noise`` each root's priors get fresh Dirichlet noise (PUCT) or its moves Gumbel
        noise (Gumbel) drawn from ``np.random.default_rng(seeds[i])`` (or the searcher's
        generator)."""
        cfg = self.config
        nodes = [r if isinstance(r, Node) else Node(copy_board(r)) for r in roots]
        for node in nodes:
            if node.terminal is not None:
                raise ValueError(f"cannot search a finished game: {node.board.fen()!r}")
        if len({id(node) for node in nodes}) < len(nodes):
            raise ValueError("a root is given twice: search each game's root once")
        if seeds is not None and len(seeds) != len(nodes):
            raise ValueError(f"got {len(seeds)} seeds for {len(nodes)} roots")
        sims = cfg.simulations if simulations is None else simulations
        if sims < 0:
            raise ValueError(f"simulations must not be negative, got {sims}")
        self._adopt(nodes)
        ids = np.array([node._id for node in nodes], dtype=np.int64)
        self._prepare_roots(nodes, ids, add_noise, seeds, sims)
        self._rounds(ids, sims)
        self.simulations_run += sims * len(nodes)
        if cfg.search == "gumbel":
            return [self._finish_gumbel(node) for node in nodes]
        return [node.visit_distribution() for node in nodes]

    def _prepare_roots(
        self, nodes: list[Node], ids: np.ndarray, add_noise: bool, seeds: Sequence[int] | None, sims: int
    ) -> None:
        """The roots' moves, evaluation, mate-in-one scan and root noise (Dirichlet, or Gumbel's
        scores and halving schedule)."""
        cfg = self.config
        tree = self.tree
        ensure_edges(tree, ids)
        self._expand(ids[np.isnan(tree.value[ids])])
        for node in nodes:
            node.find_mate()
        gumbel_search = cfg.search == "gumbel"
        for i, node in enumerate(nodes):
            rng = np.random.default_rng(seeds[i]) if seeds is not None else self.rng
            e = node._edges
            tree.chosen[node._id] = -1
            if gumbel_search:
                tree.noisy[node._id] = False
                tree.Psel[e] = tree.P[e]
                tree.N0[e] = tree.N[e]
                g = rng.gumbel(size=e.stop - e.start) if add_noise else np.zeros(e.stop - e.start)
                tree.score[e] = g + np.log(np.maximum(tree.P[e], _TINY))
            elif add_noise:
                noise = rng.dirichlet(np.full(e.stop - e.start, cfg.dirichlet_alpha))
                node.noisy_priors = (1 - cfg.dirichlet_eps) * tree.P[e] + cfg.dirichlet_eps * noise
            else:
                node.noisy_priors = None
        if gumbel_search:
            self._seq_of = {
                i: gumbel.considered_visit_sequence(min(cfg.gumbel_actions, c), sims)
                for i, c in zip(ids.tolist(), tree.count[ids].tolist(), strict=True)
            }

    def _rounds(self, ids: np.ndarray, sims: int) -> None:
        """``sims`` simulations from each root ``ids``: rounds of walks (``leaves_per_game`` per
        game, spread by virtual loss), one evaluator call for the round's fresh leaves, backups."""
        cfg = self.config
        remaining = np.full(len(ids), sims, dtype=np.int64)
        virtual = cfg.leaves_per_game > 1
        if len(ids) == 1 and not virtual and self.scalar_alone:  # no batch to build for one leaf
            self._simulate_alone(int(ids[0]), sims)
            return
        compiled = self.compiled and cfg.search == "puct"
        while remaining.any():
            k = np.minimum(cfg.leaves_per_game, remaining)
            remaining -= k
            if compiled:  # each game's walk in one compiled call: the same edges, bit for bit
                passes = [self._descend_compiled(ids[k > j], virtual) for j in range(int(k.max()))]
            else:
                passes = [self._descend(np.flatnonzero(k > j), ids, virtual) for j in range(int(k.max()))]
            leaves = np.concatenate([p[0] for p in passes])
            tree = self.tree
            fresh = leaves[np.isnan(tree.value[leaves]) & np.isnan(tree.terminal[leaves])]
            if len(fresh):
                _, first = np.unique(fresh, return_index=True)
                self._expand(fresh[np.sort(first)])
            for p in passes:
                if compiled:
                    mcts_compiled.backup_tree(self.tree, p[1], virtual, cfg.virtual_loss)
                else:
                    self._backup(*p, virtual)

    def choose_move(self, root: Node, move_number: int, rng: np.random.Generator | None = None) -> chess.Move:
        """The move to play from a searched root at ply ``move_number`` (0 = the game's first):
        after a Gumbel search, the move it chose (its Gumbel noise is the exploration); after a
        PUCT search, sampled with probability proportional to ``N ** (1 / temperature)`` for the
        first ``temperature_moves`` plies, the most visited (first on ties) after."""
        n = root.N
        if int(n.sum()) == 0:
            raise ValueError(f"no visits at the root {root.board.fen()!r}: search it first")
        if (
            move_number >= self.config.temperature_moves
            or root.mate_index is not None
            or root._tree.chosen[root._id] >= 0
        ):
            return root.best_move()
        weights = n.astype(np.float64) ** (1.0 / self.config.temperature)
        generator = rng if rng is not None else self.rng
        return root.moves[int(generator.choice(len(weights), p=weights / weights.sum()))]

    @staticmethod
    def advance(root: Node, move: chess.Move) -> Node:
        """The subtree after ``move`` (its visit counts kept), to search from next; a fresh node
        when the search never went there, or when a native game passes what the native board's
        counters hold (:func:`chessrl.search.native_board.supported`: past move 205) and goes on in
        python-chess."""
        try:
            i = root.moves.index(move)
        except ValueError:
            raise ValueError(f"illegal move {move.uci()!r} in {root.board.fen()!r}") from None
        child = root.child(i)
        root._tree.child[root._edges] = -1  # let the siblings go
        child.noisy_priors = None
        root._tree.chosen[child._id] = -1
        if child._tree.native[child._id] is not None and not native_board.supported(child.board):
            return Node(copy_board(child.board))  # past what the native board's counters hold: python-chess on
        return child

    # --- the rounds ----------------------------------------------------------------------------

    def _adopt(self, nodes: list[Node]) -> None:
        """Bring every root into this searcher's tree (copying the subtrees of roots from other
        trees), compacting the tree first when it has grown big."""
        tree = self.tree
        if tree.n_edges > max(self.COMPACT_EDGES, 2 * self._compacted_edges) or tree.n_nodes > max(
            self.COMPACT_NODES, 2 * self._compacted_nodes
        ):
            tree.compact()
            self._compacted_edges = tree.n_edges
            self._compacted_nodes = tree.n_nodes
        for node in nodes:
            if node._tree is not tree:
                old_tree, old_id = node._tree, node._id
                [new_id, *_] = tree.copy_from(old_tree, old_tree.subtree(np.array([old_id])))
                old_tree.handles.pop(old_id, None)
                node._tree, node._id = tree, int(new_id)
                tree.handles[node._id] = node

    def _pick(self, nodes: np.ndarray, at_root: bool) -> np.ndarray:
        """The edge each of ``nodes`` selects."""
        cfg = self.config
        tree = self.tree
        if cfg.search == "puct":
            return puct_pick(tree, nodes, cfg.c_puct, cfg.fpu_reduction)
        idx, valid = padded_edges(tree, nodes)
        args = (tree.value[nodes], tree.Q[idx], tree.N[idx], tree.P[idx], valid, cfg.c_visit, cfg.c_scale)
        if at_root:
            search_visits = tree.N[idx] - tree.N0[idx]
            done = np.where(valid, search_visits, 0).sum(axis=1)
            considered = np.array(
                [
                    seq[min(d, len(seq) - 1)] if seq else 0
                    for seq, d in zip(self._roots_seq(nodes), done.tolist(), strict=True)
                ],
                dtype=np.int64,
            )
            score = gumbel.root_scores(tree.score[idx], considered, search_visits, *args)
        else:
            score = gumbel.interior_scores(*args)
        pick = score.argmax(axis=1)
        mate = tree.mate[nodes]
        return tree.first[nodes] + np.where(mate >= 0, mate, pick)

    def _roots_seq(self, nodes: np.ndarray) -> list[tuple[int, ...]]:
        return [self._seq_of[i] for i in nodes.tolist()]

    def _descend(
        self, games: np.ndarray, ids: np.ndarray, virtual: bool
    ) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
        """One leaf per game in ``games`` (positions in ``ids``): every game's walk from its
        root to an unexpanded or finished node, one level at a time for all of them (virtual
        loss added on the way). Returns the leaves and, per level, the rows still walking, their
        nodes and the edges taken."""
        cfg = self.config
        tree = self.tree
        cur = ids[games].copy()
        rows_by_depth: list[np.ndarray] = []
        nodes_by_depth: list[np.ndarray] = []
        edges_by_depth: list[np.ndarray] = []
        active = np.flatnonzero(tree.walk[cur])
        depth = 0
        loss = cfg.virtual_loss
        while len(active):
            nd = cur[active]
            ensure_edges(tree, nd)
            e = self._pick(nd, depth == 0)
            if virtual:
                tree.N[e] += 1
                tree.W[e] -= loss
                tree.Q[e] = tree.W[e] / tree.N[e]
                tree.visits[nd] += 1
            rows_by_depth.append(active)
            nodes_by_depth.append(nd)
            edges_by_depth.append(e)
            ch = tree.child[e]
            missing = np.flatnonzero(ch < 0)
            if len(missing):
                first = tree.first
                for m in missing.tolist():
                    ch[m] = make_child(tree, int(nd[m]), int(e[m] - first[nd[m]]))
            cur[active] = ch
            active = active[tree.walk[ch]]
            depth += 1
        return cur, rows_by_depth, nodes_by_depth, edges_by_depth

    def _descend_compiled(self, roots: np.ndarray, virtual: bool) -> tuple[np.ndarray, mcts_compiled.Paths]:
        """:meth:`_descend` as compiled walks (:mod:`chessrl.search.mcts_compiled`), one per root."""
        cfg = self.config
        paths = mcts_compiled.descend_tree(
            self.tree, roots, cfg.c_puct, cfg.fpu_reduction, virtual, cfg.virtual_loss
        )
        return paths.leaves, paths

    def _backup(
        self,
        leaves: np.ndarray,
        rows_by_depth: list[np.ndarray],
        nodes_by_depth: list[np.ndarray],
        edges_by_depth: list[np.ndarray],
        virtual: bool,
    ) -> None:
        """Add each leaf's value (side to move at the leaf) along its path, flipping sides each
        ply, and take the virtual loss back."""
        if not rows_by_depth:
            return
        tree = self.tree
        terminal = tree.terminal[leaves]
        value = np.where(np.isnan(terminal), tree.value[leaves], terminal)
        length = np.zeros(len(leaves), dtype=np.int64)
        for rows in rows_by_depth:
            length[rows] += 1
        rows = np.concatenate(rows_by_depth)
        nodes = np.concatenate(nodes_by_depth)
        edges = np.concatenate(edges_by_depth)
        depth = np.repeat(np.arange(len(rows_by_depth)), [len(r) for r in rows_by_depth])
        signed = np.where((length[rows] - depth) % 2 == 1, -value[rows], value[rows])
        if virtual:
            tree.N[edges] -= 1
            tree.W[edges] += self.config.virtual_loss
            tree.visits[nodes] -= 1
        tree.N[edges] += 1
        tree.W[edges] += signed
        tree.Q[edges] = tree.W[edges] / tree.N[edges]
        tree.visits[nodes] += 1

    def _pick_alone(self, node: int, at_root: bool) -> int:
        """:meth:`_pick` for one node."""
        cfg = self.config
        if cfg.search != "puct":
            return int(self._pick(np.array([node]), at_root)[0])
        return puct_pick_one(self.tree, node, cfg.c_puct, cfg.fpu_reduction)

    def _simulate_alone(self, root: int, sims: int) -> None:
        """``sims`` simulations from one root, one leaf each (no virtual loss): the same walk,
        expansion and backup as a batch's rounds, in scalar steps (a batch of one does not pay
        back the array set-up per level)."""
        tree = self.tree  # growing replaces its arrays, not the tree: read them through it
        for _ in range(sims):
            node = root
            path: list[tuple[int, int]] = []
            while tree.walk[node]:
                if not tree.ready[node]:
                    ensure_edges_one(tree, node)
                e = self._pick_alone(node, not path)
                path.append((node, e))
                child = int(tree.child[e])
                if child < 0:
                    child = make_child(tree, node, e - int(tree.first[node]))
                node = child
            terminal = float(tree.terminal[node])
            if math.isnan(terminal) and math.isnan(tree.value[node]):
                self._expand(np.array([node]))
            value = float(tree.value[node]) if math.isnan(terminal) else terminal
            for parent, e in reversed(path):
                value = -value
                tree.N[e] += 1
                tree.W[e] += value
                tree.Q[e] = tree.W[e] / tree.N[e]
                tree.visits[parent] += 1

    def _expand(self, ids: np.ndarray) -> None:
        """One evaluator call for the nodes ``ids``; each gets its value and priors (a node
        whose moves are not listed yet keeps its row of logits for them, when the evaluator
        gives logits: most leaves are never walked through)."""
        if len(ids) == 0:
            return
        tree = self.tree
        evaluate_logits = getattr(self.evaluator, "evaluate_logits", None)
        if evaluate_logits is None:
            ensure_edges(tree, ids)
        id_list = ids.tolist()
        evaluate_planes = getattr(self.evaluator, "evaluate_planes", None)
        if evaluate_planes is not None and not _planes_follow_logits(type(self.evaluator)):
            evaluate_planes = None  # a subclass changed evaluate_logits alone: it must see the boards
        if evaluate_logits is not None and evaluate_planes is not None:  # planes from the native boards
            logits, values = evaluate_planes(mcts_native.planes(tree, ids, self.evaluator.history))  # type: ignore[attr-defined]
        elif evaluate_logits is not None:
            logits, values = evaluate_logits([tree.board(i) for i in id_list])
        if evaluate_logits is not None:
            if len(logits) != len(ids) or len(values) != len(ids):
                raise ValueError(
                    f"evaluator returned {len(logits)} logits and {len(values)} values for {len(ids)} boards"
                )
            ready = tree.ready[ids]
            tree.keep_logits(ids[~ready], logits[~ready])
            now = ids[ready]
            flat, _ = legal_softmax(
                logits, np.flatnonzero(ready), [tree.action[tree.edges(i)] for i in now.tolist()]
            )
            tree.set_priors(
                now, finite_priors(flat, tree.count[now]), np.asarray(values, dtype=np.float64)[ready]
            )
            later = ids[~ready]
            tree.value[later] = np.asarray(values, dtype=np.float64)[~ready]
            tree.walk[later] = np.isnan(tree.terminal[later])
            n_priors = len(ids)
        else:
            boards = [tree.board(i) for i in id_list]
            actions = [tree.action[tree.edges(i)] for i in id_list]
            evaluate_legal = getattr(self.evaluator, "evaluate_legal", None)
            if evaluate_legal is not None:  # priors per legal move: no scatter into the action space
                priors, values = evaluate_legal(boards, actions)
                per_move = [np.asarray(p, dtype=np.float64) for p in priors]
            else:
                priors, values = self.evaluator.evaluate(boards)
                per_move = [
                    _normalised(p, tree.move_list(i), a)
                    for p, i, a in zip(priors, id_list, actions, strict=False)
                ]
            n_priors = len(priors)
            if n_priors != len(ids) or len(values) != len(ids):
                raise ValueError(
                    f"evaluator returned {n_priors} priors and {len(values)} values for {len(ids)} boards"
                )
            flat = np.concatenate(per_move) if per_move else np.zeros(0)
            counts = tree.count[ids]
            if len(flat) != int(counts.sum()):
                raise ValueError(f"expected {int(counts.sum())} priors (one per legal move), got {len(flat)}")
            tree.set_priors(ids, finite_priors(flat, counts), np.asarray(values, dtype=np.float64))
        self.evaluator_calls += 1
        self.positions_evaluated += len(ids)

    def _finish_gumbel(self, node: Node) -> np.ndarray:
        """A Gumbel root after its search: the move it chose (among the most visited of this
        search, the best ``g + logits + sigma(completed Q)``) and its improved policy."""
        cfg = self.config
        tree = self.tree
        i = node._id
        e = node._edges
        if tree.mate[i] >= 0:
            tree.chosen[i] = tree.mate[i]
        else:
            visits = (tree.N[e] - tree.N0[e])[None]
            valid = np.ones_like(visits, dtype=bool)
            score = gumbel.root_scores(
                tree.score[e][None], visits.max(axis=1), visits, tree.value[[i]], tree.Q[e][None],
                tree.N[e][None], tree.P[e][None], valid, cfg.c_visit, cfg.c_scale,
            )  # fmt: skip
            tree.chosen[i] = int(score[0].argmax())
        pi = np.zeros(NUM_ACTIONS, dtype=np.float32)
        pi[node.actions] = node.improved_policy(cfg)
        return pi
