"""PUCT Monte Carlo tree search over many games at once, AlphaZero-style (or Gumbel root search).

:class:`BatchedMCTS` searches one tree per game. Each round it walks every game's tree from the
root to a leaf (``leaves_per_game`` leaves per game, spread by virtual loss), sends the leaves of
*all* games to the evaluator in *one* call, expands them and backs their values up. Terminal
positions are scored exactly and never sent to the evaluator. After a move,
:meth:`BatchedMCTS.advance` keeps the subtree.

The trees live in flat arrays (:class:`chessrl.search.mcts_tree.ArrayTree`): a round (PUCT or
Gumbel) walks every game to a leaf, makes the children it meets and backs it up in compiled code
(:mod:`chessrl.search.mcts_compiled`; the NumPy version, a few array operations per tree level for
all games, is the reference), and :class:`Node` (:mod:`chessrl.search.mcts_node`) is a handle on a
row. A standard game's nodes keep their positions in the tree's arrays
(:mod:`chessrl.search.mcts_native` on :mod:`chessrl.search.compiled_board`: the same moves, in
python-chess's order, and the same answers); such a leaf lists its moves when evaluated and keeps
only its legal moves' priors. A python-chess leaf lists its moves only when a search first walks
through it; until then it keeps its row of the network's logits. The settings are an :class:`MCTSConfig` (:mod:`chessrl.search.mcts_config`);
``MCTSConfig(search="gumbel")`` is Gumbel root search (:mod:`chessrl.search.mcts_gumbel`, its math
:mod:`chessrl.search.gumbel`).

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
from collections.abc import Sequence
from typing import Protocol

import chess
import numpy as np

from chessrl.search import mcts_compiled, mcts_gumbel, mcts_native, native_board
from chessrl.search.board_encoding import NUM_ACTIONS, copy_board, encode_boards, legal_indices, legal_mask
from chessrl.search.mcts_config import MCTSConfig
from chessrl.search.mcts_leaves import (
    ensure_edges,
    ensure_edges_one,
    finite_priors,
    legal_softmax,
    make_child,
    segment_softmax,
)
from chessrl.search.mcts_node import Node, Priors, normalised_priors
from chessrl.search.mcts_tree import ArrayTree, edge_ranges, puct_pick, puct_pick_one
from chessrl.search.network import PolicyValueNet
from chessrl.search.search_board import terminal_value

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


class Evaluator(Protocol):
    """Priors and values for a batch of positions: one call per batch of leaves."""

    def evaluate(self, boards: Sequence[chess.Board]) -> tuple[Sequence[Priors], Sequence[float]]:
        """Per board: priors over its moves, and its value from the side to move, in [-1, 1].
        The boards belong to the search tree and must not be changed."""
        ...


@functools.cache
def _planes_follow_logits(cls: type) -> bool:
    """Whether ``cls.evaluate_planes`` comes from where ``cls.evaluate_logits`` does, or below:
    then encoding the planes itself and calling ``evaluate_planes`` is ``evaluate_logits``."""

    def owner(name: str) -> type:
        return next(c for c in cls.__mro__ if name in c.__dict__)

    return issubclass(owner("evaluate_planes"), owner("evaluate_logits"))


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
    #: Rounds (PUCT or Gumbel) walk and back up in compiled code (:mod:`chessrl.search.mcts_compiled`); False: the
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
                mcts_gumbel.prepare_root(tree, node._id, e, rng, add_noise)
            elif add_noise:
                noise = rng.dirichlet(np.full(e.stop - e.start, cfg.dirichlet_alpha))
                node.noisy_priors = (1 - cfg.dirichlet_eps) * tree.P[e] + cfg.dirichlet_eps * noise
            else:
                node.noisy_priors = None
        if gumbel_search:
            self._seq_of = mcts_gumbel.halving_schedules(tree, ids, cfg, sims)

    def _rounds(self, ids: np.ndarray, sims: int) -> None:
        """``sims`` simulations from each root ``ids``: rounds of walks (``leaves_per_game`` per
        game, spread by virtual loss), one evaluator call for the round's fresh leaves, backups."""
        cfg = self.config
        remaining = np.full(len(ids), sims, dtype=np.int64)
        virtual = cfg.leaves_per_game > 1
        if len(ids) == 1 and not virtual and self.scalar_alone:  # no batch to build for one leaf
            self._simulate_alone(int(ids[0]), sims)
            return
        compiled = self.compiled
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
            return Node(
                copy_board(child.board)
            )  # past what the native board's counters hold: python-chess on
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
        return mcts_gumbel.pick(tree, nodes, at_root, self._seq_of, cfg)

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
        gumbel = (self._seq_of, cfg.c_visit, cfg.c_scale) if cfg.search == "gumbel" else None
        paths = mcts_compiled.descend_tree(
            self.tree, roots, cfg.c_puct, cfg.fpu_reduction, virtual, cfg.virtual_loss, gumbel=gumbel
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
        else:  # native leaves list their moves now (compiled, cheap): no row of logits kept for them
            native = ids[~tree.ready[ids] & tree.nat[ids]]
            if len(native):
                mcts_native.list_edges(tree, np.unique(native))
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
            everyone = bool(ready.all())  # native leaves: all listed, nothing to keep
            values = np.asarray(values, dtype=np.float64)
            if not everyone:
                tree.keep_logits(ids[~ready], logits[~ready])
            now = ids if everyone else ids[ready]
            counts = tree.count[now]
            idx, _ = edge_ranges(tree.first[now], counts)  # the legal moves' logits, gathered at once
            rows = np.repeat(np.arange(len(ids)) if everyone else np.flatnonzero(ready), counts)
            flat = segment_softmax(logits[rows, tree.action[idx]].astype(np.float64), counts)
            tree.set_priors(now, finite_priors(flat, counts), values if everyone else values[ready], idx)
            if not everyone:
                later = ids[~ready]
                tree.value[later] = values[~ready]
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
                    normalised_priors(p, tree.move_list(i), a)
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
        mcts_gumbel.choose(self.tree, node._id, node._edges, cfg)
        pi = np.zeros(NUM_ACTIONS, dtype=np.float32)
        pi[node.actions] = node.improved_policy(cfg)
        return pi
