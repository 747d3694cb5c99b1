"""Training positions by game phase: openings, middlegames and endgames cut from real games in a
configured mix (RookWorld's GRPO samples 20% openings, 60% middlegames, 20% endgames).

A position's phase, from its ply and its material (kings included):

- ``endgame``: fewer than ``ENDGAME_PIECES`` (14) pieces on the board;
- ``opening``: the first ``OPENING_PLIES`` (20) plies, unless already an endgame;
- ``middlegame``: the rest.

>>> phase_of(chess.Board(), ply=0)
'opening'
>>> phase_of(chess.Board("8/8/4k3/8/8/3K4/4P3/8 w - - 0 60"), ply=119)
'endgame'

:class:`PositionSampler` indexes each game once (one replay) and then draws positions by phase,
seeded; a phase no game reaches is drawn from the other phases instead, and the counts actually
drawn are what a caller reports:

>>> games = [{"moves": "e2e4 e7e5 g1f3 b8c6 f1b5 a7a6"}]
>>> sampler = PositionSampler(games, seed=1)
>>> picks = sampler.sample(4)
>>> sorted({p.phase for p in picks}), len(picks)
(['opening'], 4)
>>> picks[0].board().fen() == chess.Board(picks[0].fen).fen()
True
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import chess

PHASES: tuple[str, ...] = ("opening", "middlegame", "endgame")
#: RookWorld's mix: 20% openings, 60% middlegames, 20% endgames.
DEFAULT_MIX: dict[str, float] = {"opening": 0.2, "middlegame": 0.6, "endgame": 0.2}
ENDGAME_PIECES = 14
OPENING_PLIES = 20


def phase_of(board: chess.Board, ply: int) -> str:
    """``opening``, ``middlegame`` or ``endgame`` for ``board`` reached after ``ply`` plies."""
    if chess.popcount(board.occupied) < ENDGAME_PIECES:
        return "endgame"
    return "opening" if ply < OPENING_PLIES else "middlegame"


def check_mix(mix: Mapping[str, float]) -> dict[str, float]:
    """The mix normalised to sum 1; unknown phases, negative shares or an all-zero mix are a
    ValueError that names the phases.

    >>> check_mix({"opening": 1, "middlegame": 3, "endgame": 1})
    {'opening': 0.2, 'middlegame': 0.6, 'endgame': 0.2}
    """
    unknown = sorted(set(mix) - set(PHASES))
    if unknown:
        raise ValueError(f"unknown position phase(s) {', '.join(unknown)}; phases: {', '.join(PHASES)}")
    if any(float(v) < 0 for v in mix.values()) or sum(float(v) for v in mix.values()) <= 0:
        raise ValueError(f"the position mix needs shares >= 0 with a positive sum, got {dict(mix)}")
    total = sum(float(v) for v in mix.values())
    return {p: float(mix.get(p, 0.0)) / total for p in PHASES}


def split_counts(n: int, shares: Sequence[float]) -> list[int]:
    """``n`` split by ``shares`` (summing to 1) into integers that sum to ``n``: largest remainders.

    >>> split_counts(10, [0.2, 0.6, 0.2]), split_counts(4, [0.2, 0.6, 0.2])
    ([2, 6, 2], [1, 2, 1])
    """
    raw = [n * s for s in shares]
    counts = [int(r) for r in raw]
    order = sorted(range(len(raw)), key=lambda i: (counts[i] - raw[i], i))
    for i in order[: n - sum(counts)]:
        counts[i] += 1
    return counts


@dataclass(frozen=True)
class Position:
    """A position of a game: its FEN, the moves that led to it, the game's next move (``None`` at
    the game's end) and its phase."""

    fen: str
    history: tuple[str, ...]
    next_move: str | None
    phase: str
    game: int

    def board(self) -> chess.Board:
        return chess.Board(self.fen)


class PositionSampler:
    """Positions of ``games`` (rows with a ``moves`` string of UCI moves) by phase, seeded.

    Each game is replayed once, up to ``max_games`` of them; positions without a legal move
    (mates, stalemates) are left out. ``sample(n, mix)`` draws ``split_counts(n, mix)`` positions
    of each phase, uniformly over the (game, ply) pairs of that phase, in shuffled order.
    """

    def __init__(
        self, games: Iterable[Mapping[str, Any]], *, seed: int = 0, max_games: int | None = None
    ) -> None:
        self.rng = random.Random(seed)
        self.games: list[list[str]] = []
        self.index: dict[str, list[tuple[int, int]]] = {p: [] for p in PHASES}
        for row in games:
            if max_games is not None and len(self.games) >= max_games:
                break
            moves = str(row.get("moves") or "").split()
            g = len(self.games)
            self.games.append(moves)
            board = chess.Board()
            for ply in range(len(moves) + 1):
                if any(True for _ in board.legal_moves):
                    self.index[phase_of(board, ply)].append((g, ply))
                if ply == len(moves):
                    break
                try:
                    board.push_uci(moves[ply])
                except ValueError:  # a corrupt game: keep the plies before the bad move
                    break
        if not any(self.index.values()):
            self.index["opening"].append((-1, 0))  # no games: the start position
            self.games.append([])

    def available(self) -> dict[str, int]:
        """(game, ply) pairs per phase."""
        return {p: len(v) for p, v in self.index.items()}

    def sample(
        self, n: int, mix: Mapping[str, float] | None = None, *, seed: int | None = None
    ) -> list[Position]:
        """``n`` positions in the mix (default :data:`DEFAULT_MIX`); a phase with no position is
        drawn from the phases that have some, in their shares. ``seed``: this draw from its own
        seed (the same positions whatever was drawn before), else from the sampler's."""
        rng = random.Random(seed) if seed is not None else self.rng
        shares = check_mix(mix or DEFAULT_MIX)
        have = [p for p in PHASES if self.index[p]]
        if not any(shares[p] for p in have):
            shares = {p: 1.0 / len(have) if p in have else 0.0 for p in PHASES}
        else:
            shares = check_mix({p: shares[p] for p in have})
        picks: list[Position] = []
        for phase, count in zip(PHASES, split_counts(n, [shares[p] for p in PHASES]), strict=True):
            for _ in range(count):
                g, ply = rng.choice(self.index[phase])
                picks.append(self._position(g, ply, phase))
        rng.shuffle(picks)
        return picks

    def sample_distinct(
        self, n: int, mix: Mapping[str, float] | None = None, *, per_game: int, seed: int
    ) -> list[Position]:
        """Up to ``n`` positions in the mix drawn without replacement: no two of one board (the
        same pieces, side to move, castling and en passant, whatever the move counters), at most
        ``per_game`` of one game, never the start position; a phase that runs out is made up from
        the others. Fewer than ``n`` when the games hold fewer (callers report the count). For
        measures whose interval counts each game as one cluster of correlated positions.

        >>> games = [{"moves": "e2e4 e7e5 g1f3 b8c6"}, {"moves": "e2e4 c7c5 g1f3"}]
        >>> picks = PositionSampler(games).sample_distinct(10, per_game=2, seed=0)
        >>> len(picks), sorted(p.game for p in picks), len({p.fen.rsplit(" ", 2)[0] for p in picks})
        (4, [0, 0, 1, 1], 4)
        """
        rng = random.Random(seed)
        shares = check_mix(mix or DEFAULT_MIX)
        pools = {p: [gp for gp in self.index[p] if gp[1] > 0 and gp[0] >= 0] for p in PHASES}
        for pool in pools.values():
            rng.shuffle(pool)
        taken: dict[int, int] = {}
        seen: set[str] = set()
        picks: list[Position] = []

        def take(phase: str, want: int) -> None:
            pool = pools[phase]
            while want > 0 and pool:
                g, ply = pool.pop()
                if taken.get(g, 0) >= per_game:
                    continue
                position = self._position(g, ply, phase)
                board = position.fen.rsplit(" ", 2)[0]
                if board in seen:
                    continue
                seen.add(board)
                taken[g] = taken.get(g, 0) + 1
                picks.append(position)
                want -= 1

        for phase, count in zip(PHASES, split_counts(n, [shares[p] for p in PHASES]), strict=True):
            take(phase, count)
        for phase in PHASES:  # a phase that ran out: the others make it up
            take(phase, n - len(picks))
        rng.shuffle(picks)
        return picks

    def _position(self, g: int, ply: int, phase: str) -> Position:
        moves = self.games[g]
        board = chess.Board()
        for move in moves[:ply]:
            board.push_uci(move)
        next_move = moves[ply] if ply < len(moves) else None
        return Position(board.fen(), tuple(moves[:ply]), next_move, phase, max(g, 0))


def phase_counts(positions: Iterable[Position]) -> dict[str, int]:
    """How many positions of each phase (every phase named, zeros included)."""
    counts = Counter(p.phase for p in positions)
    return {p: counts.get(p, 0) for p in PHASES}


def random_game_moves(rng: random.Random, max_plies: int) -> list[str]:
    """The UCI moves of a game between two random movers (``rng``'s choices among the legal
    moves in UCI order), until it ends or reaches ``max_plies``.

    >>> moves = random_game_moves(random.Random(3), 10)
    >>> len(moves), moves == random_game_moves(random.Random(3), 10)
    (10, True)
    """
    board, moves = chess.Board(), []
    while len(moves) < max_plies and not board.is_game_over():
        move = rng.choice(sorted(m.uci() for m in board.legal_moves))
        board.push_uci(move)
        moves.append(move)
    return moves


def positions_at(moves: Sequence[str], plies: Iterable[int], game: int) -> list[Position]:
    """The positions of one game (its UCI ``moves``) before each of ``plies`` (each below the
    game's length: a move was played there), in ply order, from one replay.

    >>> [(p.history, p.next_move) for p in positions_at(["e2e4", "e7e5", "g1f3"], {2, 1}, game=0)]
    [(('e2e4',), 'e7e5'), (('e2e4', 'e7e5'), 'g1f3')]
    """
    wanted = sorted(set(plies))
    board, out = chess.Board(), []
    for ply, move in enumerate(moves):
        if wanted and ply == wanted[0]:
            wanted.pop(0)
            out.append(Position(board.fen(), tuple(moves[:ply]), move, phase_of(board, ply), game))
        if not wanted:
            break
        board.push_uci(move)
    return out


def random_game_positions(n: int, *, seed: int, max_plies: int = 200, per_game: int = 4) -> list[Position]:
    """``n`` positions from games between two random movers (the chaos a random opponent makes,
    which human and engine games never show), ``per_game`` plies drawn from each game, seeded;
    positions without a legal move are left out.

    >>> picks = random_game_positions(6, seed=3)
    >>> len(picks), picks == random_game_positions(6, seed=3), all(p.board().legal_moves.count() for p in picks)
    (6, True, True)
    """
    rng = random.Random(seed)
    picks: list[Position] = []
    game = 0
    while len(picks) < n:
        moves = random_game_moves(rng, max_plies)
        plies = [p for p in range(len(moves)) if p > 0]  # before the game's last move: a move is legal there
        picks += positions_at(moves, rng.sample(plies, min(per_game, len(plies))), game)[: n - len(picks)]
        game += 1
    return picks


#: Piece values a greedy mover grabs by (pawn 1 ... queen 9).
PIECE_VALUES: dict[int, int] = {
    chess.PAWN: 1,
    chess.KNIGHT: 3,
    chess.BISHOP: 3,
    chess.ROOK: 5,
    chess.QUEEN: 9,
    chess.KING: 0,
}


def greedy_move(board: chess.Board, rng: random.Random) -> str:
    """A one-ply material grabber's move: a mate in one if there is one, else the capture of the
    most valuable piece (ties drawn by ``rng``), else a random legal move. Against a random mover
    it wins most games (~90%): the games it makes are where one side is far ahead and a mate is
    near, the positions human games rarely hold.

    >>> greedy_move(chess.Board("6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1"), random.Random(0))   # back-rank mate
    'd1d8'
    >>> greedy_move(chess.Board("4k3/8/8/3q4/8/8/3R4/4K3 w - - 0 1"), random.Random(0))       # the hanging queen
    'd2d5'
    """
    moves = sorted(board.legal_moves, key=chess.Move.uci)
    for move in moves:
        if board.gives_check(move):
            board.push(move)
            mate = board.is_checkmate()
            board.pop()
            if mate:
                return move.uci()
    gains = [_captured_value(board, m) for m in moves]
    best = max(gains)
    return rng.choice([m for m, g in zip(moves, gains, strict=True) if g == best]).uci()


def _captured_value(board: chess.Board, move: chess.Move) -> int:
    if board.is_en_passant(move):
        return PIECE_VALUES[chess.PAWN]
    piece = board.piece_at(move.to_square)
    return PIECE_VALUES[piece.piece_type] if piece is not None else 0


def lopsided_game_moves(rng: random.Random, max_plies: int, noise: float = 0.1) -> list[str]:
    """The UCI moves of a game between a greedy mover (:func:`greedy_move`, a random move
    ``noise`` of the time) and a random mover, the greedy side White or Black by ``rng``, until
    the game ends or reaches ``max_plies``.

    >>> moves = lopsided_game_moves(random.Random(1), 60)
    >>> 0 < len(moves) <= 60, moves == lopsided_game_moves(random.Random(1), 60)
    (True, True)
    """
    board, moves = chess.Board(), []
    greedy_side = rng.random() < 0.5
    while len(moves) < max_plies and not board.is_game_over():
        if board.turn == greedy_side and rng.random() >= noise:
            move = greedy_move(board, rng)
        else:
            move = rng.choice(sorted(m.uci() for m in board.legal_moves))
        board.push_uci(move)
        moves.append(move)
    return moves


def lopsided_game_positions(n: int, *, seed: int, max_plies: int = 200, per_game: int = 4) -> list[Position]:
    """``n`` positions of games between a greedy mover and a random mover
    (:func:`lopsided_game_moves`), ``per_game`` plies from each game: a game that ends in mate
    gives the position before the mate (a mate in one) and the rest are drawn, the later half of
    a game twice as likely (where one side is far ahead); positions without a legal move left out.

    >>> picks = lopsided_game_positions(6, seed=3)
    >>> len(picks), picks == lopsided_game_positions(6, seed=3)
    (6, True)
    """
    rng = random.Random(seed)
    picks: list[Position] = []
    game = 0
    while len(picks) < n:
        moves = lopsided_game_moves(rng, max_plies)
        picks += decisive_positions(moves, rng, per_game, game)[: n - len(picks)]
        game += 1
    return picks


def decisive_positions(moves: Sequence[str], rng: random.Random, per_game: int, game: int) -> list[Position]:
    """``per_game`` positions of one game (its UCI ``moves``) where the lesson is: the position
    before a mate that ended it (a mate in one), the rest drawn with the later half of the game
    twice as likely (where one side is far ahead); none before the first move.

    >>> [p.next_move for p in decisive_positions(["f2f3", "e7e5", "g2g4", "d8h4"], random.Random(0), 1, 0)]
    ['d8h4']
    """
    plies = list(range(1, len(moves)))
    weights = [2.0 if ply >= len(moves) / 2 else 1.0 for ply in plies]
    chosen: set[int] = set()
    final = chess.Board()
    for move in moves:
        final.push_uci(move)
    if plies and final.is_checkmate():
        chosen.add(plies[-1])  # the mate in one that ended it
    while plies and len(chosen) < min(per_game, len(plies)):
        chosen.add(rng.choices(plies, weights)[0])
    return positions_at(moves, chosen, game)
