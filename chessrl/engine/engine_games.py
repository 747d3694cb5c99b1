"""Stockfish-against-Stockfish games for a training corpus, Ray-free and reproducible.

Many games advance in step: each step asks the engine for every unfinished game's position at
once (one batch, each position with its side's node budget), then each game picks its move with its own seeded RNG. Variety
comes from us, not from the engine's own randomness (Stockfish's Skill Level draws from a
time-seeded PRNG): a few random opening plies, a node budget per side drawn from
``nodes_levels``, and sampling among the engine's ``multipv`` best lines with a per-side
temperature. With ``fresh`` searches (hash cleared before each) and one thread per engine, the
same seed gives the same games.

>>> settings = GeneratorSettings(games=2, seed=7)
>>> games = [EngineGame.start(i, settings) for i in range(settings.games)]
>>> all(len(g.moves) >= settings.random_plies[0] for g in games)
True
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import chess

from chessrl.data.games import GameRecord, game_id_for
from chessrl.data.positions import Position, decisive_positions
from chessrl.engine.client import Analysis, SearchLimit

ENGINE_NAME = "Stockfish"


@dataclass(frozen=True)
class GeneratorSettings:
    """How the corpus is generated (see ``prepare --generate``)."""

    games: int
    """How many games."""
    seed: int = 7
    """Same seed, same games."""
    random_plies: tuple[int, int] = (2, 8)
    """Random legal plies at the start of each game, uniform in [min, max]."""
    nodes_levels: tuple[int, ...] = (500, 1000, 2000, 4000)
    """Node budget per move; each side of each game draws one (its strength)."""
    temperature: tuple[float, float] = (0.0, 0.5)
    """Sampling temperature (pawns) among the best lines; each side draws one from [min, max]."""
    multipv: int = 3
    """Lines the engine reports per position (the candidates sampled from)."""
    max_plies: int = 240
    """A game still running after this many plies is a draw (termination 'max_plies')."""
    resign_cp: int = 1000
    """Adjudicate a win when the score stays beyond this many centipawns ..."""
    resign_plies: int = 8
    """... for this many consecutive plies."""
    concurrent_games: int = 64
    """Games advancing in step (the batch size sent to the engines)."""

    def __post_init__(self) -> None:
        if self.games < 1:
            raise ValueError(f"games must be >= 1, got {self.games}")
        lo, hi = self.random_plies
        if not 0 <= lo <= hi:
            raise ValueError(f"random_plies must be 0 <= min <= max, got {self.random_plies}")
        if not self.nodes_levels or min(self.nodes_levels) < 1:
            raise ValueError(f"nodes_levels must be positive node counts, got {self.nodes_levels}")
        t_lo, t_hi = self.temperature
        if not 0 <= t_lo <= t_hi:
            raise ValueError(f"temperature must be 0 <= min <= max, got {self.temperature}")
        if self.multipv < 1 or self.max_plies < 1 or self.concurrent_games < 1:
            raise ValueError("multipv, max_plies and concurrent_games must be >= 1")


@dataclass(frozen=True)
class Side:
    """One side's strength in one game."""

    nodes: int
    temperature: float

    def label(self) -> str:
        return f"{ENGINE_NAME} nodes={self.nodes} T={self.temperature:.2f}"


def choose_move(analysis: Analysis, temperature: float, rng: random.Random) -> str:
    """The best line's move at temperature 0; otherwise a softmax over the lines' scores.

    >>> from chessrl.engine.client import Line, Score
    >>> a = Analysis(fen="", lines=(Line("e2e4", Score(30, None), ()), Line("a2a3", Score(-500, None), ())))
    >>> choose_move(a, 0.0, random.Random(1)), choose_move(a, 0.3, random.Random(1))
    ('e2e4', 'e2e4')
    """
    lines = analysis.lines
    if not lines:
        raise ValueError(f"no move to choose in a finished position {analysis.fen!r}")
    if temperature <= 0 or len(lines) == 1:
        return lines[0].move
    best = max(line.score.value for line in lines)
    weights = [math.exp(max(-50.0, (line.score.value - best) / (100.0 * temperature))) for line in lines]
    return rng.choices([line.move for line in lines], weights=weights, k=1)[0]


@dataclass
class EngineGame:
    """One game being generated."""

    index: int
    seed: int
    white: Side
    black: Side
    rng: random.Random
    settings: GeneratorSettings
    board: chess.Board = field(default_factory=chess.Board)
    moves: list[str] = field(default_factory=list)
    result: str | None = None
    termination: str | None = None
    opening_plies: int = 0
    _streak: int = 0
    _streak_winner: chess.Color | None = None

    @classmethod
    def start(cls, index: int, settings: GeneratorSettings) -> EngineGame:
        rng = random.Random(f"{settings.seed}:{index}")
        sides = [
            Side(
                nodes=rng.choice(settings.nodes_levels),
                temperature=round(rng.uniform(*settings.temperature), 2),
            )
            for _ in range(2)
        ]
        game = cls(
            index=index, seed=settings.seed, white=sides[0], black=sides[1], rng=rng, settings=settings
        )
        game._random_opening()
        return game

    def _random_opening(self) -> None:
        lo, hi = self.settings.random_plies
        for _attempt in range(20):
            self.board.reset()
            self.moves.clear()
            plies = self.rng.randint(lo, hi)
            for _ in range(plies):
                legal = sorted(m.uci() for m in self.board.legal_moves)
                move = self.rng.choice(legal)
                self.board.push_uci(move)
                self.moves.append(move)
                if self.board.is_game_over():
                    break
            if not self.board.is_game_over():
                self.opening_plies = len(self.moves)
                return
        raise RuntimeError(f"no playable random opening for game {self.index}")  # pragma: no cover

    @property
    def finished(self) -> bool:
        return self.result is not None

    @property
    def side_to_move(self) -> Side:
        return self.white if self.board.turn == chess.WHITE else self.black

    def limit(self) -> SearchLimit:
        return SearchLimit(nodes=self.side_to_move.nodes)

    def apply(self, analysis: Analysis) -> None:
        """Play the move chosen from the analysis of the current position; end the game if due."""
        score = analysis.score.value  # from the side to move
        winner = None
        if abs(score) >= self.settings.resign_cp:
            winner = self.board.turn if score > 0 else not self.board.turn
        if winner is not None and winner == self._streak_winner:
            self._streak += 1
        else:
            self._streak, self._streak_winner = (1, winner) if winner is not None else (0, None)
        if self._streak >= self.settings.resign_plies and self._streak_winner is not None:
            self.result = "1-0" if self._streak_winner == chess.WHITE else "0-1"
            self.termination = "adjudication"
            return
        move = choose_move(analysis, self.side_to_move.temperature, self.rng)
        self.board.push_uci(move)
        self.moves.append(move)
        outcome = self.board.outcome(claim_draw=True)
        if outcome is not None:
            self.result = outcome.result()
            self.termination = outcome.termination.name.lower()
        elif len(self.moves) >= self.settings.max_plies:
            self.result = "1/2-1/2"
            self.termination = "max_plies"

    def headers(self) -> dict[str, str]:
        return {
            "Event": f"chess-rl generate seed={self.seed}",
            "Site": "chess-rl",
            "Date": "????.??.??",
            "Round": str(self.index + 1),
            "White": self.white.label(),
            "Black": self.black.label(),
            "Result": self.result or "*",
        }

    def record(self) -> GameRecord:
        moves = " ".join(self.moves)
        return GameRecord(
            game_id=game_id_for(self.headers(), moves),
            source="stockfish",
            white=self.white.label(),
            black=self.black.label(),
            white_elo=None,
            black_elo=None,
            result=self.result or "*",
            termination=self.termination or "unknown",
            eco=None,
            time_control=None,
            moves=moves,
            n_plies=len(self.moves),
        )

    def pgn(self) -> str:
        """The game as PGN text (open it in any chess GUI)."""
        import chess.pgn

        game = chess.pgn.Game()
        for key, value in self.headers().items():
            game.headers[key] = value
        game.headers["Termination"] = self.termination or "unknown"
        game.headers["PlyCount"] = str(len(self.moves))
        game.headers["Annotator"] = f"{self.opening_plies} random opening plies"
        node: chess.pgn.GameNode = game
        for uci in self.moves:
            node = node.add_variation(chess.Move.from_uci(uci))
        return str(game)


Analyse = Callable[[Sequence[str], Sequence[SearchLimit], int], Sequence[Analysis]]


def generate_games(settings: GeneratorSettings, analyse: Analyse) -> Iterator[EngineGame]:
    """Play ``settings.games`` games, ``concurrent_games`` at a time; yield each as it finishes.

    ``analyse(fens, limits, multipv)`` answers a batch of positions, one limit each, in order (an
    EnginePool, an EngineGroup, or anything else); it should search with a cleared hash for
    reproducibility.
    """
    waiting = iter(range(settings.games))
    active: list[EngineGame] = []

    def refill() -> None:
        while len(active) < settings.concurrent_games:
            index = next(waiting, None)
            if index is None:
                return
            active.append(EngineGame.start(index, settings))

    refill()
    while active:
        # One batch per step, each position with its own side's node budget.
        answers = analyse([g.board.fen() for g in active], [g.limit() for g in active], settings.multipv)
        for game, analysis in zip(active, answers, strict=True):
            game.apply(analysis)
        still = []
        for game in active:
            if game.finished:
                yield game
            else:
                still.append(game)
        active[:] = still
        refill()


#: Stockfish's node budgets in games against a random mover: a weak engine that still takes
#: what hangs and mates when it sees it (one node already finds a mate in one).
RANDOM_OPPONENT_NODES: tuple[int, ...] = (1, 10, 100)


def random_opponent_games(
    games: int,
    seed: int,
    analyse: Analyse,
    *,
    nodes_levels: Sequence[int] = RANDOM_OPPONENT_NODES,
    noise: float = 0.1,
    max_plies: int = 200,
    concurrent_games: int = 64,
) -> list[list[str]]:
    """The UCI moves of ``games`` games between Stockfish and a random mover: what a policy that
    plays a random opponent meets, with the engine's own way of winning (hung pieces taken, mates
    played). Each game draws Stockfish's colour and node budget from ``nodes_levels``; a random
    legal move ``noise`` of the engine's turns. Games advance in step, one ``analyse`` batch a ply
    (multipv 1, each position with its game's budget), each game with its own seeded RNG: with a
    cleared hash, the same seed gives the same games.

    >>> from chessrl.engine.client import Line, Score
    >>> first = lambda fens, limits, mpv: [Analysis(f, (Line(sorted(m.uci() for m in chess.Board(f).legal_moves)[0], Score(0, None), ()),)) for f in fens]
    >>> games = random_opponent_games(2, 5, first, max_plies=6)
    >>> [len(g) for g in games], games == random_opponent_games(2, 5, first, max_plies=6)
    ([6, 6], True)
    """
    out: list[list[str]] = []
    for start in range(0, games, concurrent_games):
        indices = range(start, min(games, start + concurrent_games))
        rngs = [random.Random(f"{seed}:random-opponent:{i}") for i in indices]
        engine_side = [rng.random() < 0.5 for rng in rngs]
        limits = [SearchLimit(nodes=rng.choice(tuple(nodes_levels))) for rng in rngs]
        boards = [chess.Board() for _ in rngs]
        moves: list[list[str]] = [[] for _ in rngs]
        active = list(range(len(rngs)))
        while active:
            asked = [g for g in active if boards[g].turn == engine_side[g] and rngs[g].random() >= noise]
            found = analyse([boards[g].fen() for g in asked], [limits[g] for g in asked], 1) if asked else []
            answers = dict(zip(asked, found, strict=True))
            for g in active:
                move = (
                    answers[g].lines[0].move
                    if g in answers and answers[g].lines
                    else rngs[g].choice(sorted(m.uci() for m in boards[g].legal_moves))
                )
                boards[g].push_uci(move)
                moves[g].append(move)
            active = [g for g in active if len(moves[g]) < max_plies and not boards[g].is_game_over()]
        out += moves
    return out


def random_opponent_positions(
    n: int, *, seed: int, analyse: Analyse, max_plies: int = 200, per_game: int = 4
) -> list[Position]:
    """``n`` positions of :func:`random_opponent_games`, ``per_game`` from each
    (:func:`chessrl.data.positions.decisive_positions`: a game's final mate in one, the later half
    twice as likely), seeded; positions without a legal move left out.

    >>> from chessrl.engine.client import Line, Score
    >>> first = lambda fens, limits, mpv: [Analysis(f, (Line(sorted(m.uci() for m in chess.Board(f).legal_moves)[0], Score(0, None), ()),)) for f in fens]
    >>> picks = random_opponent_positions(5, seed=2, analyse=first, max_plies=20)
    >>> len(picks), all(p.board().legal_moves.count() for p in picks)
    (5, True)
    """
    rng = random.Random(seed)
    picks: list[Position] = []
    batch = 0
    while len(picks) < n:
        wanted = max(1, -(-(n - len(picks)) // per_game))
        games = random_opponent_games(wanted, seed * 1_000_003 + batch, analyse, max_plies=max_plies)
        for game, moves in enumerate(games):
            found = decisive_positions(moves, rng, per_game, batch * 100_000 + game)
            picks += [p for p in found if p.board().legal_moves.count()][: n - len(picks)]
        batch += 1
    return picks
