"""Test suites and move-quality measures, Ray-free: EPD ``bm``/``am`` suites (WAC, Bratko-Kopec),
average centipawn loss and Lichess-style accuracy.

>>> [p] = parse_epd_lines(['1k6/8/1K6/8/8/8/8/7R w - - bm Rh8#; id "mate";'], "x.epd")
>>> p.best, p.id
(('h1h8',), 'mate')
>>> round(win_percent(0), 1), round(win_percent(300), 1)
(50.0, 75.1)
>>> round(move_accuracy(75.0, 75.0), 1), round(move_accuracy(75.0, 25.0), 1)
(100.0, 8.5)

Win% and move accuracy are Lichess's published formulas: win% = 50 + 50 (2 / (1 + e^(-0.00368208 cp)) - 1)
from the mover's view; accuracy = 103.1668 e^(-0.04354 (win%before - win%after)) - 3.1669, clipped to
0..100. A game's accuracy here is the plain mean of its moves' accuracies (Lichess weights by
volatility and mixes in a harmonic mean).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import chess

from chessrl.arena.players import Player
from cluster.errors import InputDataError

CP_CAP = 1000  # centipawn losses and mate scores are capped here, as most ACPL tools do


@dataclass(frozen=True)
class SuitePosition:
    """An EPD test position: best moves (``bm``) and/or moves to avoid (``am``), in UCI."""

    fen: str
    best: tuple[str, ...]
    avoid: tuple[str, ...]
    id: str

    def solved_by(self, move: str | None) -> bool:
        if move is None:
            return False
        return (not self.best or move in self.best) and move not in self.avoid


def parse_epd(line: str) -> tuple[chess.Board, dict[str, str]]:
    """The position and the operations (operands as text, quotes removed) of one EPD line.

    Read leniently, as real suites need (``chess.Board.from_epd`` rejects both files in
    tests/data/epd): NUL bytes are dropped, an unquoted ``id`` is text, and operands are not
    parsed as moves here (WAC's ``pv`` are cut short mid-move). A bad position is a ValueError.

    >>> board, ops = parse_epd("1k1r4/pp1b1R2/3q2pp/4p3/2B5/4Q3/PPP2B2/2K5 b - - ; bm Qd1 + ; id BK.01\\x00")
    >>> ops, epd_moves(board, ops["bm"])
    ({'bm': 'Qd1 +', 'id': 'BK.01'}, ('d6d1',))
    """
    fields = line.replace("\x00", "").split(None, 4)
    if len(fields) < 4:
        raise ValueError(f"an EPD line starts with 4 position fields, got {len(fields)}")
    board = chess.Board(" ".join(fields[:4]))
    ops: dict[str, str] = {}
    for op in (fields[4] if len(fields) > 4 else "").split(";"):
        parts = op.strip().split(None, 1)
        if parts:
            ops[parts[0]] = parts[1].strip().strip('"') if len(parts) > 1 else ""
    return board, ops


def epd_moves(board: chess.Board, operand: str) -> tuple[str, ...]:
    """UCI moves from a ``bm``/``am`` operand (SAN; ``Qd1 +`` reads as ``Qd1+``); a move that
    is not legal in ``board`` is a ValueError."""
    return tuple(board.parse_xboard(san).uci() for san in re.sub(r"\s+([+#])", r"\1", operand).split())


def parse_epd_lines(lines: Sequence[str], source: str) -> list[SuitePosition]:
    """Suite positions from EPD lines; a line without ``bm``/``am`` or a bad one is an error."""
    out: list[SuitePosition] = []
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            board, ops = parse_epd(line)
            best, avoid = epd_moves(board, ops.get("bm", "")), epd_moves(board, ops.get("am", ""))
        except ValueError as exc:
            raise InputDataError(f"{source}:{number}: not an EPD position ({exc})") from None
        if not best and not avoid:
            raise InputDataError(f"{source}:{number}: an EPD test position needs a bm or am operation")
        out.append(
            SuitePosition(board.fen(), best, avoid, str(ops.get("id", f"{Path(source).stem}-{number}")))
        )
    return out


def read_epd_suite(path: str | Path) -> list[SuitePosition]:
    """Every test position of an EPD file, read to its end (so a phase can check a suite before
    it plays anything): a missing file, a bad line or a file without positions is an
    InputDataError naming the file (and the line)."""
    path = Path(path)
    if not path.is_file():
        raise InputDataError(f"test suite {path} does not exist")
    positions = parse_epd_lines(path.read_text(errors="replace").splitlines(), str(path))
    if not positions:
        raise InputDataError(f"test suite {path} holds no EPD test position (FEN fields, then bm or am)")
    return positions


@dataclass(frozen=True)
class SuiteResult:
    """How a player did on a suite."""

    name: str
    positions: int
    solved: int
    legal_first_attempt: int
    failed_ids: tuple[str, ...]

    @property
    def accuracy(self) -> float:
        return self.solved / self.positions if self.positions else 0.0


def run_suite(player: Player, name: str, positions: Sequence[SuitePosition], *, seed: int = 0) -> SuiteResult:
    """The player's move in every position (from its FEN, no history); solved when it is a ``bm``
    and not an ``am``."""
    solved = legal = 0
    failed: list[str] = []
    for i, pos in enumerate(positions):
        player.new_game(seed + i)
        choice = player.move(chess.Board(pos.fen))
        legal += int(choice.first_attempt_legal)
        if pos.solved_by(choice.move):
            solved += 1
        else:
            failed.append(pos.id)
    return SuiteResult(name, len(positions), solved, legal, tuple(failed))


# ---------------------------------------------------------------------------------------------
# move quality


def score_cp(score: Any) -> int:
    """A ``chessrl.engine.client.Score`` as centipawns from the mover's view, mates as +-CP_CAP."""
    if score.mate is not None:
        return CP_CAP if score.mate > 0 else -CP_CAP
    return int(score.cp)


def win_percent(cp: float) -> float:
    """Lichess's winning chances (0..100) for a centipawn score from the mover's view."""
    cp = max(-CP_CAP, min(CP_CAP, cp))
    return 50 + 50 * (2 / (1 + math.exp(-0.00368208 * cp)) - 1)


def move_accuracy(win_before: float, win_after: float) -> float:
    """Lichess's accuracy (0..100) of a move that took the mover from ``win_before`` to ``win_after``."""
    raw = 103.1668 * math.exp(-0.04354 * max(0.0, win_before - win_after)) - 3.1669
    return max(0.0, min(100.0, raw))


@dataclass(frozen=True)
class MoveQuality:
    """Average centipawn loss and accuracy over a set of moves."""

    moves: int
    acpl: float
    accuracy: float


def move_quality(pairs: Sequence[tuple[int, int]]) -> MoveQuality:
    """From ``(best_cp, played_cp)`` pairs, both from the mover's view (mates already mapped to
    +-CP_CAP): ACPL (losses capped at CP_CAP) and the mean Lichess accuracy.

    >>> move_quality([(50, 50), (100, -100)])
    MoveQuality(moves=2, acpl=100.0, accuracy=...)
    """
    if not pairs:
        return MoveQuality(0, 0.0, 0.0)
    losses = [min(CP_CAP, max(0, best - played)) for best, played in pairs]
    acc = [move_accuracy(win_percent(best), win_percent(played)) for best, played in pairs]
    return MoveQuality(len(pairs), sum(losses) / len(pairs), sum(acc) / len(acc))
