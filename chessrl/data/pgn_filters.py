"""What a PGN game's headers and final position say, and which games to keep: time-control
categories, terminations, results and :class:`GameFilter` (:mod:`chessrl.data.pgn` applies it
to every parsed game).

>>> GameFilter(time_controls=("blitz",)).reason({"TimeControl": "60+0"}, n_plies=40, termination="normal")
'time_control'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import chess

#: Time-control categories, Lichess's rule: estimated seconds = base + 40 * increment.
TimeControlCategory = Literal[
    "ultrabullet", "bullet", "blitz", "rapid", "classical", "correspondence", "unknown"
]
TIME_CONTROL_CATEGORIES: tuple[str, ...] = (
    "ultrabullet",
    "bullet",
    "blitz",
    "rapid",
    "classical",
    "correspondence",
    "unknown",
)


def time_control_category(tc: str | None) -> str:
    """Lichess's categories from a TimeControl header.

    >>> [time_control_category(t) for t in ("60+0", "180+2", "600+5", "1800+20", "-", None)]
    ['bullet', 'blitz', 'rapid', 'classical', 'correspondence', 'unknown']
    """
    if tc is None or not tc.strip() or tc.strip() == "?":
        return "unknown"
    tc = tc.strip()
    if tc == "-":
        return "correspondence"
    base_text, _, inc_text = tc.partition("+")
    try:
        base, inc = int(base_text), int(inc_text or 0)
    except ValueError:
        return "unknown"
    seconds = base + 40 * inc
    if seconds < 30:
        return "ultrabullet"
    if seconds < 180:
        return "bullet"
    if seconds < 480:
        return "blitz"
    if seconds < 1500:
        return "rapid"
    return "classical"


def termination_of(board: chess.Board | None, header: str | None) -> str:
    """``checkmate``/``stalemate``/... from the final position, else the normalised header.

    >>> termination_of(chess.Board("7k/6Q1/6K1/8/8/8/8/8 b - - 0 1"), "Normal")
    'checkmate'
    >>> termination_of(chess.Board(), "Time forfeit")
    'time_forfeit'
    """
    if board is not None:
        outcome = board.outcome(claim_draw=False)
        if outcome is not None:
            return outcome.termination.name.lower()
    if header and header.strip() and header.strip() != "?":
        return "_".join(header.strip().lower().replace("-", " ").split())
    return "unknown"


def result_of(board: chess.Board | None, header_result: str | None, movetext_result: str) -> str:
    """The game's result: the Result header, else the movetext's, else the final position's."""
    for candidate in (header_result, movetext_result):
        if candidate in ("1-0", "0-1", "1/2-1/2"):
            return candidate
    if board is not None:
        outcome = board.outcome(claim_draw=False)
        if outcome is not None:
            return outcome.result()
    return "*"


def header_elo(value: str | None) -> int | None:
    """A rating header as a number, or None when it is missing or not a plausible Elo."""
    if value is None:
        return None
    value = value.strip()
    return int(value) if value.isdigit() and 0 < int(value) < 5000 else None


def header_name(value: str | None) -> str | None:
    """A header's text, or None when it is empty or ``?``."""
    if value is None:
        return None
    value = value.strip()
    return value if value and value != "?" else None


@dataclass(frozen=True)
class GameFilter:
    """Which games to keep.

    >>> GameFilter(min_elo=2000).reason({"WhiteElo": "2100", "BlackElo": "1900"}, n_plies=40, termination="normal")
    'elo_below_min'
    """

    min_elo: int = 0
    """Both players rated at least this (0 = no rating needed)."""
    time_controls: tuple[str, ...] = ()
    """Allowed time-control categories (empty = any)."""
    terminations: tuple[str, ...] = ()
    """Allowed terminations, as in the games table (empty = any)."""
    min_plies: int = 1
    """Fewer half-moves than this are skipped."""

    def __post_init__(self) -> None:
        if self.min_elo < 0:
            raise ValueError(f"min_elo must be >= 0, got {self.min_elo}")
        if self.min_plies < 0:
            raise ValueError(f"min_plies must be >= 0, got {self.min_plies}")
        bad = [t for t in self.time_controls if t not in TIME_CONTROL_CATEGORIES]
        if bad:
            raise ValueError(
                f"unknown time control {bad[0]!r}; allowed: {', '.join(TIME_CONTROL_CATEGORIES)}"
            )

    def reason(self, headers: Mapping[str, str], *, n_plies: int, termination: str) -> str | None:
        """The skip reason for a legal game, or ``None`` to keep it."""
        if n_plies == 0:
            return "no_moves"
        if n_plies < self.min_plies:
            return "too_short"
        if self.min_elo > 0:
            elos = (header_elo(headers.get("WhiteElo")), header_elo(headers.get("BlackElo")))
            if None in elos:
                return "missing_elo"
            if min(e for e in elos if e is not None) < self.min_elo:
                return "elo_below_min"
        if self.time_controls and time_control_category(headers.get("TimeControl")) not in self.time_controls:
            return "time_control"
        if self.terminations and termination not in self.terminations:
            return "termination"
        return None
