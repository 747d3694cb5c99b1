"""PUCT Monte Carlo tree search over many games at once, AlphaZero-style.

:class:`BatchedMCTS` searches one tree per game. Each round it walks every game's tree from the
root to a leaf (``leaves_per_game`` leaves per game, spread by virtual loss), sends the leaves of
*all* games to the evaluator in *one* call, expands them and backs their values up. Terminal
positions are scored exactly and never sent to the evaluator. A tree keeps each node's legal
moves and their action indices; after a move, :meth:`BatchedMCTS.advance` keeps the subtree.

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

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeAlias

import chess
import numpy as np

from chessrl.board_encoding import NUM_ACTIONS, copy_board, encode_boards, legal_indices, legal_mask
from chessrl.network import PolicyValueNet

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
#: :mod:`chessrl.board_encoding`, or a mapping from moves to priors. Either is renormalised over
#: the legal moves (uniform when it puts no mass on them).
Priors: TypeAlias = np.ndarray | Mapping[chess.Move, float]


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

    def __post_init__(self) -> None:
        for name in ("simulations", "leaves_per_game"):
            if getattr(self, name) < 1:
                raise ValueError(f"MCTSConfig.{name} must be at least 1, got {getattr(self, name)!r}")
        for name in ("c_puct", "dirichlet_alpha", "temperature"):
            if not getattr(self, name) > 0:
                raise ValueError(f"MCTSConfig.{name} must be positive, got {getattr(self, name)!r}")
        if not 0 <= self.dirichlet_eps <= 1:
            raise ValueError(f"MCTSConfig.dirichlet_eps must be in [0, 1], got {self.dirichlet_eps!r}")
        if self.virtual_loss < 0 or self.temperature_moves < 0:
            raise ValueError("MCTSConfig.virtual_loss and temperature_moves must not be negative")


def terminal_value(board: chess.Board, legal_moves: int | None = None) -> float | None:
    """The exact value of a finished game for the side to move (-1 checkmated, 0 drawn), or None.

    Draws: stalemate, insufficient material, the 75-move and fivefold rules (as
    ``board.outcome(claim_draw=False)``), and also a threefold repetition or a fifty-move claim.

    >>> terminal_value(chess.Board("6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1"))   # None: play on
    >>> terminal_value(chess.Board("3R2k1/5ppp/8/8/8/8/5PPP/6K1 b - - 1 1"))
    -1.0
    >>> terminal_value(chess.Board("7k/8/8/8/8/8/8/K7 w - - 0 1"))   # bare kings
    0.0
    """
    n = board.legal_moves.count() if legal_moves is None else legal_moves
    if n == 0:
        return -1.0 if board.is_check() else 0.0
    if board.is_insufficient_material():
        return 0.0
    # a threefold repetition needs at least 8 reversible plies; it includes the fivefold rule
    if board.halfmove_clock >= 8 and board.is_repetition(3):
        return 0.0
    if board.halfmove_clock >= 99 and board.can_claim_fifty_moves():  # includes the 75-move rule
        return 0.0
    return None


class Node:
    """A position in a search tree: its legal moves and their action indices (computed once),
    and per move the prior ``P``, visit count ``N`` and total value ``W`` (from the side to move
    here). Children are created when the search first walks into them.

    >>> node = Node(chess.Board())
    >>> len(node.moves), node.expanded, node.terminal
    (20, False, None)
    """

    __slots__ = (
        "Q",
        "W",
        "N",
        "actions",
        "board",
        "children",
        "mate_index",
        "moves",
        "noisy_priors",
        "priors",
        "terminal",
        "value",
        "visits",
    )

    def __init__(self, board: chess.Board) -> None:
        #: The position, with its move stack (the tree's own copy).
        self.board = board
        moves, actions = legal_indices(board, cache=False)  # a tree meets few transpositions
        #: Legal moves, in python-chess's order.
        self.moves: list[chess.Move] = moves
        #: Their action indices (``int64``).
        self.actions: np.ndarray = actions
        #: Exact value for the side to move when the game is over here, else None.
        self.terminal: float | None = terminal_value(board, len(moves))
        #: The evaluator's value for the side to move, once expanded.
        self.value: float | None = None
        self.priors = np.zeros(len(moves), dtype=np.float64)
        #: The priors with Dirichlet noise, used instead of ``priors`` while this node is a root.
        self.noisy_priors: np.ndarray | None = None
        self.N = np.zeros(len(moves), dtype=np.int64)
        self.W = np.zeros(len(moves), dtype=np.float64)
        #: ``W / N`` per move, 0 where ``N`` is 0 (kept up to date with ``N`` and ``W``).
        self.Q = np.zeros(len(moves), dtype=np.float64)
        #: ``N.sum()``, kept up to date.
        self.visits = 0
        self.children: list[Node | None] = [None] * len(moves)
        #: A move (its position in ``moves``) found to checkmate at once: selected from then on.
        self.mate_index: int | None = None

    @property
    def expanded(self) -> bool:
        """Whether the evaluator has given this node its priors and value."""
        return self.value is not None

    def expand(self, priors: Priors, value: float) -> None:
        """Store the evaluator's priors (renormalised over the legal moves) and value."""
        if isinstance(priors, np.ndarray):
            if priors.shape != (NUM_ACTIONS,):
                raise ValueError(f"priors must have shape ({NUM_ACTIONS},), got {priors.shape}")
            p = priors[self.actions].astype(np.float64)
        else:
            p = np.array([float(priors.get(m, 0.0)) for m in self.moves], dtype=np.float64)
        total = float(p.sum())
        self.set_priors(
            p / total if total > 0 and math.isfinite(total) else np.full(len(p), 1.0 / len(p)), value
        )

    def set_priors(self, priors: np.ndarray, value: float) -> None:
        """Store priors already given per legal move (aligned with ``moves``, summing to 1) and the
        value: :meth:`expand` without the gather from the whole action space."""
        if priors.shape != (len(self.moves),):
            raise ValueError(
                f"expected {len(self.moves)} priors (one per legal move), got shape {priors.shape}"
            )
        if len(priors) and not np.isfinite(priors).all():  # a diverged network: search on uniform priors
            priors = np.full(len(priors), 1.0 / len(priors))
        self.priors = priors
        self.value = float(value)

    def select(self, c_puct: float, fpu_reduction: float | None = None) -> int:
        """The move (its position in ``moves``) with the highest ``Q + U`` (unvisited: ``Q = 0``);
        ties go to the first. A move known to mate is always selected."""
        if self.mate_index is not None:
            return self.mate_index
        n = self.N
        visits = self.visits
        q = self.Q
        if fpu_reduction is not None:
            mean = float(self.W.sum()) / visits if visits else (self.value or 0.0)
            q = np.where(n > 0, q, mean - fpu_reduction)
        priors = self.priors if self.noisy_priors is None else self.noisy_priors
        u = c_puct * priors * (math.sqrt(max(visits, 1)) / (1.0 + n))
        return int(np.argmax(q + u))

    def child(self, i: int) -> Node:
        """The node after ``moves[i]``, created on first use."""
        node = self.children[i]
        if node is None:
            board = copy_board(self.board)
            board.push(self.moves[i])
            node = self.children[i] = Node(board)
            if node.terminal is not None and node.terminal < 0:
                self.mate_index = i
        return node

    def visit_distribution(self) -> np.ndarray:
        """Visit counts as a float32 ``(NUM_ACTIONS,)`` distribution (zeros before any visit)."""
        pi = np.zeros(NUM_ACTIONS, dtype=np.float32)
        total = int(self.N.sum())
        if total:
            pi[self.actions] = self.N / total
        return pi

    def sparse_visits(self) -> tuple[np.ndarray, np.ndarray]:
        """The visited moves' action indices (int64) and visit shares (float32): the replay
        table's sparse policy target.

        >>> Node(chess.Board()).sparse_visits()
        (array([], dtype=int64), array([], dtype=float32))
        """
        visited = self.N > 0
        total = max(int(self.N.sum()), 1)
        return self.actions[visited], (self.N[visited] / total).astype(np.float32)

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
        if self.mate_index is None:
            board = self.board
            for i, move in enumerate(self.moves):
                if board.gives_check(move):
                    board.push(move)
                    mate = board.is_checkmate()
                    board.pop()
                    if mate:
                        self.mate_index = i
                        break
        return self.mate_index

    def best_move(self) -> chess.Move:
        """A move found to mate at once, else the most visited move (the first on ties)."""
        if not self.moves:
            raise ValueError(f"no legal moves in {self.board.fen()!r}")
        if self.mate_index is not None:
            return self.moves[self.mate_index]
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
    """A :class:`~chessrl.network.PolicyValueNet` as an evaluator: the boards are encoded and sent
    through the net in one batch; priors are the softmax of the logits over the legal moves.

    >>> from chessrl.network import NetConfig
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
        logits in a few array operations. :class:`BatchedMCTS` uses this when an evaluator has it.
        """
        self.calls += 1
        self.positions += len(boards)
        if not boards:
            return [], []
        logits, values = self.net.predict(encode_boards(boards, self.history))  # (B, 4672), (B,)
        value_list = values.astype(np.float64).tolist()
        playable = [i for i, a in enumerate(actions) if len(a)]  # a finished game has no priors
        priors = [np.zeros(0, dtype=np.float64) for _ in actions]
        if not playable:
            return priors, value_list
        lengths = np.array([len(actions[i]) for i in playable], dtype=np.int64)
        rows = np.repeat(np.array(playable, dtype=np.int64), lengths)
        flat = logits[rows, np.concatenate([actions[i] for i in playable])].astype(np.float64)
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        segment = np.repeat(np.arange(len(playable)), lengths)
        flat = np.exp(flat - np.maximum.reduceat(flat, starts)[segment])
        flat /= np.add.reduceat(flat, starts)[segment]
        for i, p in zip(playable, np.split(flat, starts[1:]), strict=True):
            priors[i] = p
        return priors, value_list


_Path = list[tuple[Node, int]]


class BatchedMCTS:
    """PUCT search over many games' trees, with one evaluator call per round of leaves.

    ``seed`` drives the Dirichlet noise and move sampling unless a search or a choice is given
    its own seeds or generator.
    """

    def __init__(self, evaluator: Evaluator, config: MCTSConfig | None = None, seed: int = 0) -> None:
        self.evaluator = evaluator
        self.config = config if config is not None else MCTSConfig()
        self.rng = np.random.default_rng(seed)
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
        root's visit distribution over ``NUM_ACTIONS``. Boards are wrapped in fresh nodes (pass
        nodes to keep the trees). With ``add_noise`` each root's priors get fresh Dirichlet noise
        drawn from ``np.random.default_rng(seeds[i])`` (or the searcher's generator)."""
        cfg = self.config
        nodes = [r if isinstance(r, Node) else Node(copy_board(r)) for r in roots]
        for node in nodes:
            if node.terminal is not None:
                raise ValueError(f"cannot search a finished game: {node.board.fen()!r}")
        if seeds is not None and len(seeds) != len(nodes):
            raise ValueError(f"got {len(seeds)} seeds for {len(nodes)} roots")
        sims = cfg.simulations if simulations is None else simulations
        if sims < 0:
            raise ValueError(f"simulations must not be negative, got {sims}")
        self._expand([node for node in nodes if not node.expanded])
        for node in nodes:
            node.find_mate()
        for i, node in enumerate(nodes):
            node.noisy_priors = None
            if add_noise:
                rng = np.random.default_rng(seeds[i]) if seeds is not None else self.rng
                noise = rng.dirichlet(np.full(len(node.moves), cfg.dirichlet_alpha))
                node.noisy_priors = (1 - cfg.dirichlet_eps) * node.priors + cfg.dirichlet_eps * noise
        remaining = [sims] * len(nodes)
        virtual = cfg.leaves_per_game > 1
        while any(remaining):
            pending: list[tuple[_Path, Node]] = []
            for g, root in enumerate(nodes):
                k = min(cfg.leaves_per_game, remaining[g])
                remaining[g] -= k
                pending += [self._select(root, virtual) for _ in range(k)]
            fresh = {id(leaf): leaf for _, leaf in pending if leaf.terminal is None and not leaf.expanded}
            self._expand(list(fresh.values()))
            for path, leaf in pending:
                value = leaf.terminal if leaf.terminal is not None else leaf.value
                assert value is not None
                self._backup(path, value, virtual)
        self.simulations_run += sims * len(nodes)
        return [node.visit_distribution() for node in nodes]

    def choose_move(self, root: Node, move_number: int, rng: np.random.Generator | None = None) -> chess.Move:
        """The move to play from a searched root at ply ``move_number`` (0 = the game's first):
        sampled with probability proportional to ``N ** (1 / temperature)`` for the first
        ``temperature_moves`` plies, the most visited (first on ties) after."""
        if int(root.N.sum()) == 0:
            raise ValueError(f"no visits at the root {root.board.fen()!r}: search it first")
        if move_number >= self.config.temperature_moves or root.mate_index is not None:
            return root.best_move()
        weights = root.N.astype(np.float64) ** (1.0 / self.config.temperature)
        generator = rng if rng is not None else self.rng
        return root.moves[int(generator.choice(len(weights), p=weights / weights.sum()))]

    @staticmethod
    def advance(root: Node, move: chess.Move) -> Node:
        """The subtree after ``move`` (its visit counts kept), to search from next; a fresh node
        when the search never went there."""
        try:
            i = root.moves.index(move)
        except ValueError:
            raise ValueError(f"illegal move {move.uci()!r} in {root.board.fen()!r}") from None
        child = root.child(i)
        root.children = [None] * len(root.moves)  # let the siblings go
        child.noisy_priors = None
        return child

    def _select(self, root: Node, virtual: bool) -> tuple[_Path, Node]:
        """Walk from ``root`` by PUCT to an unexpanded or terminal node, adding virtual loss."""
        path: _Path = []
        node = root
        c_puct, loss, fpu = self.config.c_puct, self.config.virtual_loss, self.config.fpu_reduction
        while node.expanded and node.terminal is None:
            i = node.select(c_puct, fpu)
            if virtual:
                node.N[i] += 1
                node.W[i] -= loss
                node.Q[i] = node.W[i] / node.N[i]
                node.visits += 1
            path.append((node, i))
            node = node.child(i)
        return path, node

    def _backup(self, path: _Path, value: float, virtual: bool) -> None:
        """Add the leaf's ``value`` (side to move at the leaf) along ``path``, flipping sides each
        ply, and take the virtual loss back."""
        loss = self.config.virtual_loss
        for node, i in reversed(path):
            value = -value
            if virtual:
                node.N[i] -= 1
                node.W[i] += loss
                node.visits -= 1
            node.N[i] += 1
            node.W[i] += value
            node.Q[i] = node.W[i] / node.N[i]
            node.visits += 1

    def _expand(self, leaves: list[Node]) -> None:
        """One evaluator call for all ``leaves``; each gets its priors and value."""
        if not leaves:
            return
        boards = [leaf.board for leaf in leaves]
        evaluate_legal = getattr(self.evaluator, "evaluate_legal", None)
        if evaluate_legal is not None:  # priors per legal move: no scatter into the action space and back
            priors, values = evaluate_legal(boards, [leaf.actions for leaf in leaves])
        else:
            priors, values = self.evaluator.evaluate(boards)
        if len(priors) != len(leaves) or len(values) != len(leaves):
            raise ValueError(
                f"evaluator returned {len(priors)} priors and {len(values)} values for {len(leaves)} boards"
            )
        self.evaluator_calls += 1
        self.positions_evaluated += len(leaves)
        for leaf, p, v in zip(leaves, priors, values, strict=True):
            if evaluate_legal is not None:
                leaf.set_priors(p, v)
            else:
                leaf.expand(p, v)
