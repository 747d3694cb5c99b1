"""Self-play: many games at once, one batched MCTS search per move across all of them. Ray-free.

:class:`SelfPlay` keeps ``concurrent_games`` games going. Each :meth:`SelfPlay.step` searches
every game's position in one :meth:`~chessrl.search.mcts.BatchedMCTS.search` (so the evaluator sees
the leaves of all games in one batch), picks a move per game (sampled from the visit counts for
the first ``temperature_moves`` plies, the most visited after), keeps the searched subtree, and
returns the games that ended. A finished game carries one training position per ply: the input
planes, the search's visit distribution (sparse) and the game's result from that side to move.

>>> from chessrl.search.mcts import MCTSConfig, UniformEvaluator
>>> sp = SelfPlay(UniformEvaluator(), MCTSConfig(simulations=4), SelfPlaySettings(concurrent_games=3,
...               max_plies=6, history=1), seed=1)
>>> games = sp.play(4)
>>> len(games), {g.termination for g in games}, [len(g.positions) for g in games]
(4, {'max_plies'}, [6, 6, 6, 6])
>>> sp.evaluator.calls <= 4 * 6 * 5      # batched: far fewer calls than positions searched
True

A game still going after ``max_plies`` is adjudicated on material when one side is ahead by
``adjudicate_material`` pawns or more (0: always a draw), so that early self-play, where almost
no game ends in a mate, still teaches the value head something:

>>> material_balance(chess.Board("4k3/8/8/8/8/8/4P3/R3K3 w - - 0 1"))   # white: rook + pawn
6
"""

from __future__ import annotations

from dataclasses import dataclass, field

import chess
import numpy as np

from chessrl.search.board_encoding import encode_board
from chessrl.search.mcts import BatchedMCTS, Evaluator, MCTSConfig, Node, terminal_value

__all__ = [
    "PIECE_VALUES",
    "FinishedGame",
    "SelfPlay",
    "SelfPlaySettings",
    "TrainingPosition",
    "material_balance",
]

#: Pawn units per piece type for adjudication.
PIECE_VALUES = {chess.PAWN: 1, chess.KNIGHT: 3, chess.BISHOP: 3, chess.ROOK: 5, chess.QUEEN: 9, chess.KING: 0}


def material_balance(board: chess.Board) -> int:
    """White's material minus black's, in pawns (P=1, N=B=3, R=5, Q=9).

    >>> material_balance(chess.Board())
    0
    """
    total = 0
    for piece_type, value in PIECE_VALUES.items():
        total += value * (
            len(board.pieces(piece_type, chess.WHITE)) - len(board.pieces(piece_type, chess.BLACK))
        )
    return total


@dataclass(frozen=True)
class SelfPlaySettings:
    """How self-play games are run (the search itself is an :class:`~chessrl.search.mcts.MCTSConfig`)."""

    #: Games played at once; their leaves share one evaluator call per search round.
    concurrent_games: int = 16
    #: A game still going after this many plies is adjudicated.
    max_plies: int = 200
    #: At ``max_plies``: a side ahead by at least this many pawns wins (0: every such game is a draw).
    adjudicate_material: int = 3
    #: Positions of history in the stored planes (the network's ``NetConfig.history``).
    history: int = 2

    def __post_init__(self) -> None:
        for name in ("concurrent_games", "max_plies", "history"):
            if getattr(self, name) < 1:
                raise ValueError(f"SelfPlaySettings.{name} must be at least 1, got {getattr(self, name)!r}")
        if self.adjudicate_material < 0:
            raise ValueError(
                f"SelfPlaySettings.adjudicate_material must not be negative, got {self.adjudicate_material!r}"
            )


@dataclass
class TrainingPosition:
    """One replay row: planes, the search's visits (sparse), the result for the side to move."""

    planes: np.ndarray  # (C, 8, 8) float32
    policy_indices: np.ndarray  # int64 action indices of the visited moves
    policy_probs: np.ndarray  # float32 visit shares, summing to 1
    value: float  # the game's result from this position's side to move: 1, 0 or -1
    ply: int
    network_version: int


@dataclass
class FinishedGame:
    """A self-play game: its moves, result (``1-0``, ``0-1``, ``1/2-1/2``), how it ended, and
    one training position per ply."""

    game_id: str
    moves: list[str]
    result: str
    termination: str
    positions: list[TrainingPosition] = field(default_factory=list)

    @property
    def white_score(self) -> float:
        return {"1-0": 1.0, "0-1": -1.0}.get(self.result, 0.0)


@dataclass
class _Slot:
    game_id: str
    root: Node
    moves: list[str] = field(default_factory=list)
    pending: list[tuple[np.ndarray, np.ndarray, np.ndarray, bool, int, int]] = field(default_factory=list)


def _ending(board: chess.Board, value: float) -> tuple[str, str]:
    """Result and termination of a position whose :func:`terminal_value` is ``value``."""
    if value < 0:
        return ("0-1" if board.turn == chess.WHITE else "1-0"), "checkmate"
    outcome = board.outcome(claim_draw=True)
    return "1/2-1/2", (outcome.termination.name.lower() if outcome is not None else "draw")


class SelfPlay:
    """``concurrent_games`` self-play games searched together; see the module docstring.

    ``game_prefix`` names the games (``<prefix>-<n>``); ``network_version`` is stamped on every
    position and can be changed between steps with :meth:`set_evaluator`.
    """

    def __init__(
        self,
        evaluator: Evaluator,
        mcts: MCTSConfig,
        settings: SelfPlaySettings | None = None,
        *,
        seed: int = 0,
        game_prefix: str = "g",
        network_version: int = 0,
    ) -> None:
        self.evaluator = evaluator
        self.settings = settings if settings is not None else SelfPlaySettings()
        self.search = BatchedMCTS(evaluator, mcts, seed=seed)
        self.rng = np.random.default_rng(seed)
        self.game_prefix = game_prefix
        self.network_version = network_version
        self.slots: list[_Slot] = []
        #: Games started so far (they are numbered from 0).
        self.games_started = 0
        #: Moves played so far, over all games.
        self.moves_played = 0

    def set_evaluator(self, evaluator: Evaluator, network_version: int) -> None:
        """Use a new network from the next move on; the trees are dropped (their priors and
        values came from the old one)."""
        self.evaluator = evaluator
        self.search.evaluator = evaluator
        self.network_version = network_version
        for slot in self.slots:
            slot.root = Node(slot.root.board)

    def start(self, board: chess.Board | None = None) -> str:
        """Start a game from ``board`` (default: the start position; a copy is kept, history
        included); returns its id. :meth:`step` starts the others it needs itself.

        >>> from chessrl.search.mcts import UniformEvaluator
        >>> sp = SelfPlay(UniformEvaluator(), MCTSConfig(simulations=8), SelfPlaySettings(history=1))
        >>> sp.start(chess.Board("6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1"))
        'g-0'
        >>> [game] = sp.step(start_new=False)
        >>> game.moves, game.result
        (['d1d8'], '1-0')
        """
        game_id = f"{self.game_prefix}-{self.games_started}"
        root = Node(board.copy() if board is not None else chess.Board())
        self.slots.append(_Slot(game_id=game_id, root=root))
        self.games_started += 1
        return game_id

    def step(self, start_new: bool = True) -> list[FinishedGame]:
        """One move in every running game (starting games up to ``concurrent_games`` first when
        ``start_new``); returns the games that ended with it."""
        while start_new and len(self.slots) < self.settings.concurrent_games:
            self.start()
        if not self.slots:
            return []
        history = self.settings.history
        self.search.search([slot.root for slot in self.slots])
        finished: list[FinishedGame] = []
        still: list[_Slot] = []
        for slot in self.slots:
            root = slot.root
            indices, probs = root.policy_target(self.search.config)  # visits, or Gumbel's improved policy
            ply = len(slot.moves)
            slot.pending.append(
                (
                    encode_board(root.board, history),
                    indices,
                    probs,
                    root.board.turn,
                    ply,
                    self.network_version,
                )
            )
            move = self.search.choose_move(root, ply, rng=self.rng)
            slot.moves.append(move.uci())
            slot.root = BatchedMCTS.advance(root, move)
            self.moves_played += 1
            game = self._finish_if_over(slot)
            if game is None:
                still.append(slot)
            else:
                finished.append(game)
        self.slots = still
        return finished

    def _finish_if_over(self, slot: _Slot) -> FinishedGame | None:
        board = slot.root.board
        value = slot.root.terminal if slot.root.terminal is not None else terminal_value(board)
        if value is not None:
            result, termination = _ending(board, value)
        elif len(slot.moves) >= self.settings.max_plies:
            balance = material_balance(board)
            threshold = self.settings.adjudicate_material
            if threshold and balance >= threshold:
                result, termination = "1-0", "adjudicated_material"
            elif threshold and balance <= -threshold:
                result, termination = "0-1", "adjudicated_material"
            else:
                result, termination = "1/2-1/2", "max_plies"
        else:
            return None
        game = FinishedGame(slot.game_id, slot.moves, result, termination)
        white_score = game.white_score
        for planes, indices, probs, turn, ply, version in slot.pending:
            value_for_mover = (white_score if turn == chess.WHITE else -white_score) + 0.0  # no -0.0
            game.positions.append(TrainingPosition(planes, indices, probs, value_for_mover, ply, version))
        return game

    def play(self, n_games: int) -> list[FinishedGame]:
        """Play until ``n_games`` more games have ended (at most ``concurrent_games`` at once)."""
        target = self.games_started + n_games
        done: list[FinishedGame] = []
        while len(done) < n_games and (self.slots or self.games_started < target):
            while len(self.slots) < self.settings.concurrent_games and self.games_started < target:
                self.start()
            done += self.step(start_new=False)
        return done
