"""The low Elo ladder: rungs below Stockfish's weakest ``UCI_Elo``, rated once against it, so that
a weak model gets a finite Elo with an interval instead of ``-inf``. Ray-free.

Debian's Stockfish 15.1 offers ``UCI_Elo`` 1350 at the lowest, and a freshly trained small model
loses every game to it. The rungs between a random mover and that anchor are the anchor itself
with a handicap: a uniformly random legal move ``random=P`` percent of the time. Measured on 2 CPUs
(20 games a pair, 1,000 nodes a move), each rung scores 65-85% against the one below it, close
enough that every pair's score is informative:

>>> settings = LadderSettings()
>>> settings.rungs[0], settings.rungs[-1]
('random', 'stockfish:elo=1350,nodes=1000')
>>> settings.pairs()[0]
('random', 'stockfish:elo=1350,nodes=1000,random=90')

Adjacent rungs play ``games`` games each; one maximum-likelihood fit over all of them, with the
``UCI_Elo`` rung fixed at its rating, rates every rung (:func:`fit_ladder`). The result is stored
under the storage with its games, keyed by the settings and the Stockfish build
(:func:`stockfish_build`), and reused by every later evaluation. The rungs' own intervals are wide
at the bottom (each is chained through the rungs above it); a candidate's interval is given with
the rungs' ratings held fixed, so two candidates rated on the same ladder compare more tightly
than either compares with the ``UCI_Elo`` scale.

A candidate is then placed: a short match against every rung, an estimate from it
(:func:`estimate`), and more games against the rungs where its expected score is informative
(:func:`informative_rungs`).
"""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from chessrl.arena.players import parse_player_spec
from chessrl.arena.rating import PlayerRating, expected_score, rate_players

#: Weakest first. The handicap shares were chosen from measured scores (see the module docstring).
DEFAULT_RUNGS: tuple[str, ...] = (
    "random",
    *(f"stockfish:elo=1350,nodes=1000,random={p}" for p in (90, 75, 60, 45, 30, 20, 10)),
    "stockfish:elo=1350,nodes=1000",
)


@dataclass(frozen=True)
class LadderSettings:
    """What a ladder's ratings depend on (besides the Stockfish build): its key hashes these."""

    rungs: tuple[str, ...] = DEFAULT_RUNGS
    """Player specs, weakest first; at least one is anchored (``stockfish:elo=N``)."""
    games: int = 40
    """Games per adjacent pair of rungs (colours alternate; each opening from both sides)."""
    max_plies: int = 200
    """A ladder game still going after this many plies is a draw."""
    random_plies: int = 4
    """Seeded random opening plies."""
    seed: int = 7

    def __post_init__(self) -> None:
        specs = [parse_player_spec(r, key="evaluate.ladder") for r in self.rungs]
        if len(specs) < 2:
            raise ValueError("a ladder needs at least two rungs")
        if len({s.label for s in specs}) != len(specs):
            raise ValueError("a ladder names a rung twice")
        if not any(s.anchor_elo is not None for s in specs):
            raise ValueError("a ladder needs an anchored rung (stockfish:elo=N) to rate the others against")
        if any(s.kind not in ("random", "stockfish") for s in specs):
            raise ValueError(
                "ladder rungs are random or stockfish players (they must play the same everywhere)"
            )
        if self.games < 2:
            raise ValueError(f"ladder games per pair must be at least 2, got {self.games}")

    @property
    def labels(self) -> list[str]:
        return [parse_player_spec(r).label for r in self.rungs]

    def pairs(self) -> list[tuple[str, str]]:
        """Adjacent rungs, ``(weaker, stronger)``."""
        labels = self.labels
        return list(zip(labels, labels[1:], strict=False))

    def key(self) -> str:
        """A short hash of the settings: the ladder's folder name.

        >>> LadderSettings().key() == LadderSettings().key() != LadderSettings(games=4).key()
        True
        """
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


def stockfish_build(path: str) -> str:
    """The Stockfish binary's identity: its UCI ``id name`` and the first 16 hex digits of the
    file's SHA-256 (a rebuilt binary with the same name is another build)."""
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    name = "unknown"
    try:
        out = subprocess.run([path], input="uci\nquit\n", capture_output=True, text=True, timeout=30).stdout
        name = next(
            (line[len("id name ") :].strip() for line in out.splitlines() if line.startswith("id name ")),
            name,
        )
    except (OSError, subprocess.TimeoutExpired):
        pass
    return f"{name} (sha256 {digest})"


@dataclass(frozen=True)
class Ladder:
    """The rated rungs: ``ratings[label] = (elo, low, high)`` from the calibration games."""

    settings_key: str
    stockfish: str
    games: int
    ratings: dict[str, tuple[float, float, float]] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Ladder:
        data = json.loads(text)
        ratings = {k: (float(v[0]), float(v[1]), float(v[2])) for k, v in data["ratings"].items()}
        return cls(str(data["settings_key"]), str(data["stockfish"]), int(data["games"]), ratings)

    def elo(self, label: str) -> float:
        return self.ratings[label][0]


def fit_ladder(games: Sequence[tuple[str, str, float]], settings: LadderSettings, stockfish: str) -> Ladder:
    """Rate every rung by maximum likelihood over the calibration ``games`` (``(white, black,
    white's score)``), the anchored rungs fixed. A rung that swept (or lost) every game against its
    neighbours has no finite MLE: then every rung is fitted with one virtual draw against the
    anchors' mean (:func:`~chessrl.arena.rating.rate_players`' ``prior_games``), which keeps each
    rating finite and the rungs in the order their games put them (a one-sided bound of a sweep
    is not: a rung that lost every game would sit at its upper bound, above its conqueror).

    >>> s = LadderSettings(rungs=("random", "stockfish:elo=1350,random=50", "stockfish:elo=1350"), games=4)
    >>> g = [("random", "stockfish:elo=1350,random=50", 0.0), ("stockfish:elo=1350,random=50", "random", 0.5)] * 2
    >>> g += [("stockfish:elo=1350", "stockfish:elo=1350,random=50", 1.0), ("stockfish:elo=1350,random=50", "stockfish:elo=1350", 0.5)] * 2
    >>> ladder = fit_ladder(g, s, "Stockfish 15.1")
    >>> [round(ladder.elo(x)) for x in s.labels]
    [968, 1159, 1350]
    >>> swept = [("stockfish:elo=1350,random=50", "random", 1.0), ("stockfish:elo=1350", "stockfish:elo=1350,random=50", 1.0)] * 4
    >>> [round(fit_ladder(swept, s, "Stockfish 15.1").elo(x)) for x in s.labels]
    [752, 1102, 1350]
    """
    specs = [parse_player_spec(r) for r in settings.rungs]
    anchors = {s.label: float(s.anchor_elo) for s in specs if s.anchor_elo is not None}
    fitted = rate_players(list(games), anchors)
    if not all(math.isfinite(r.elo) for r in fitted.values()):
        fitted = rate_players(list(games), anchors, prior_games=1.0)
    ratings: dict[str, tuple[float, float, float]] = {}
    for label in settings.labels:
        r = fitted.get(label)
        if r is None:
            raise ValueError(f"ladder rung {label} played no game")
        ratings[label] = _finite(r)
    return Ladder(settings.key(), stockfish, len(games), ratings)


def _finite(r: PlayerRating) -> tuple[float, float, float]:
    if math.isfinite(r.elo):
        return r.elo, r.low, r.high
    bound = r.low if math.isfinite(r.low) else r.high
    return bound, bound, bound


def estimate(
    candidate: str, games: Sequence[tuple[str, str, float]], anchors: dict[str, float]
) -> PlayerRating:
    """The candidate's rating from its games against rated players (``anchors``: label -> Elo).

    An infinite estimate (it won or lost every game) comes back with its one-sided bound finite.
    """
    relevant = [g for g in games if candidate in g[:2] and ({g[0], g[1]} - {candidate}) <= anchors.keys()]
    if not relevant:
        raise ValueError(f"{candidate} played no game against a rated player")
    used = {p for g in relevant for p in g[:2]} - {candidate}
    return rate_players(relevant, {k: v for k, v in anchors.items() if k in used})[candidate]


def informative_rungs(
    ladder: Ladder, rating: PlayerRating, *, low: float = 0.15, high: float = 0.85, most: int = 3
) -> list[str]:
    """The rungs against which a player rated ``rating`` is expected to score between ``low``
    and ``high`` (closest to 50% first, at most ``most``); when none is, the nearest rung.

    >>> ladder = Ladder("k", "sf", 0, {"a": (0, 0, 0), "b": (200, 0, 0), "c": (900, 0, 0)})
    >>> r = PlayerRating("x", 150.0, 100.0, 200.0, 4, 0.5, False)
    >>> informative_rungs(ladder, r)
    ['b', 'a']
    >>> informative_rungs(ladder, PlayerRating("x", -math.inf, -math.inf, -500.0, 4, 0.0, False))
    ['a']
    """
    elo = (
        rating.elo
        if math.isfinite(rating.elo)
        else (rating.low if math.isfinite(rating.low) else rating.high)
    )
    by_distance = sorted(ladder.ratings, key=lambda label: abs(ladder.elo(label) - elo))
    chosen = [x for x in by_distance if low <= expected_score(elo - ladder.elo(x)) <= high][:most]
    return chosen or by_distance[:1]


def describe(ladder: Ladder) -> list[str]:
    """One line per rung, weakest first."""
    rows = sorted(ladder.ratings.items(), key=lambda kv: kv[1][0])
    return [f"{label:<40} {elo:7.0f}  {_range(lo, hi)}" for label, (elo, lo, hi) in rows]


def _range(low: float, high: float) -> str:
    """``(lo .. hi)``; a rung with no interval is the anchor or one that won or lost every game,
    kept at its one-sided bound (see ``_finite``).

    >>> _range(1200.4, 1301), _range(968, 968)
    ('(1200 .. 1301)', '(fixed, or a one-sided 95% bound)')
    """
    return f"({low:.0f} .. {high:.0f})" if high > low else "(fixed, or a one-sided 95% bound)"


def ladder_record(ladder: Ladder) -> dict[str, Any]:
    """The ladder as a JSON-able dict for reports."""
    return json.loads(ladder.to_json())
