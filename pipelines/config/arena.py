"""``evaluate``'s section: players in an arena, Elo (and the low Elo ladder), suites, a report."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from chessrl.arena.ladder import DEFAULT_RUNGS
from cluster.config import Section


class EvaluateConfig(Section):
    """``evaluate``: players in an arena (Ray tasks, one per game), Elo, suites, PGN and a report."""

    players: list[str] = Field(
        default_factory=lambda: ["sft", "random", "stockfish:skill=0", "stockfish:elo=1350"]
    )
    """Players: random, sft (this run's model), lm:DIR|s3://..., judge:DIR (a reward model's
    best legal move), mcts[:FILE.pt][,sims=N][,search=gumbel]
    (a selfplay network with MCTS; bare: this run's best), stockfish[:skill=N|elo=N][,nodes=N],
    uci:PATH[,nodes=N|movetime_ms=N]. The first is the candidate (in paired mode: the start). The
    default: this run's sft model against a random mover and the weakest Stockfish levels, Skill
    Level 0 and UCI_Elo 1350 (the lowest Debian's Stockfish 15.1 advertises: it anchors the Elo)."""
    mode: Literal["gauntlet", "round_robin", "sprt", "paired"] = "gauntlet"
    """gauntlet: the first player against each of the others; round_robin: every pair; sprt: two
    players in game pairs (one opening, colours swapped) until the SPRT decides or --games;
    paired: no games: each other player's legal-masked moves against the first's (their start) on
    the same held-out positions, Stockfish-scored, each one's paired gain and, from two on (the
    same learner from several seeds), the mean gain with an interval that counts the runs' spread."""
    pairs: list[str] = Field(default_factory=list)
    """Only these pairings, each ``I-J``: the players at indices I and J (0 is the first), e.g.
    ``0-2 1-2`` (empty: the mode's own pairings). For gauntlet and round_robin."""
    games: int = Field(10, ge=2)
    """Games per pairing (colours alternate; each opening is played from both sides); in sprt
    mode the most games played before stopping undecided."""
    elo0: float = 0.0
    """sprt: H0, the Elo difference (first player minus second) the test accepts when it fails."""
    elo1: float = 20.0
    """sprt: H1, the Elo difference the test accepts when it passes (above elo0)."""
    alpha: float = Field(0.05, gt=0, lt=0.5)
    """sprt: the false-positive rate (accepting H1 when H0 holds), in (0, 0.5)."""
    beta: float = Field(0.05, gt=0, lt=0.5)
    """sprt: the false-negative rate (accepting H0 when H1 holds), in (0, 0.5)."""
    ladder: bool = True
    """Rate the candidate on the low Elo ladder (rungs below Stockfish's weakest UCI_Elo, rated
    once per storage and Stockfish build and reused), so a weak model gets a finite Elo."""
    ladder_rungs: list[str] = Field(default_factory=lambda: list(DEFAULT_RUNGS))
    """The ladder's rungs, weakest first: random and stockfish specs, one at least with elo=N."""
    ladder_games: int = Field(40, ge=2)
    """Calibration games per adjacent pair of rungs (played once, then reused)."""
    placement_games: int = Field(2, ge=2)
    """The candidate's placement games against every rung."""
    ladder_match_games: int = Field(8, ge=0)
    """Then this many more against each rung where its expected score is informative (15-85%)."""
    openings: str | None = None
    """Opening book: an .epd or .pgn file (default: openings of opening_source)."""
    opening_source: Literal["heldout", "random"] = "heldout"
    """Without a book: heldout: the first opening_plies moves of held-out games (sft.heldout_fraction)
    of positions_from, positions a player meets (no such games: random, said in the log); random:
    random_plies seeded random moves."""
    opening_plies: tuple[int, int] = (6, 12)
    """heldout openings: each game's opening ends at a ply drawn in [min, max] (seeded by --seed)."""
    random_plies: int = Field(4, ge=0)
    """Plies of each seeded random opening (opening_source random, or no held-out games), and of
    the ladder's games."""
    max_plies: int = Field(200, ge=1)
    """A game still going after this many plies is a draw."""
    resign_cp: int | None = Field(None, ge=100)
    """Engine-verified resignation: a side at this many centipawns down or worse ..."""
    resign_plies: int = Field(6, ge=1)
    """... for this many of its plies in a row loses (needs resign_cp)."""
    adjudicate_cp: int | None = Field(None, ge=1)
    """At max_plies, Stockfish's evaluation decides the game: the side ahead by at least this many
    centipawns wins, else a draw (null: every game at max_plies is a draw). With weak players
    most games reach the cap; this makes them count."""
    lm_temperature: float = Field(0.0, ge=0)
    """Language models: 0 plays the argmax move; above 0 samples."""
    lm_retries: int = Field(3, ge=0)
    """Language models: samples tried after an illegal or unparseable move."""
    on_illegal: Literal["fallback", "forfeit"] = "fallback"
    """After the retries: play a random legal move (counted) or lose the game."""
    stockfish_nodes: int = Field(1000, ge=1)
    """Node limit of Stockfish players that set no nodes/movetime_ms."""
    engines: int = Field(1, ge=1)
    """Stockfish processes in the engine pool (players, resignation checks, move quality)."""
    suites: list[str] = Field(
        default_factory=lambda: ["tests/data/epd/wac.epd", "tests/data/epd/bratko-kopec.epd"]
    )
    """EPD test suites (bm/am) the candidate is run on."""
    quality_nodes: int = Field(2000, ge=0)
    """Nodes per position for the candidate's average centipawn loss and accuracy (0: skip); in
    paired mode, for scoring the players' moves (above 0)."""
    positions: int = Field(1000, ge=2)
    """paired: held-out positions the players answer (openings, middlegames and endgames of the
    held-out games, seeded by the run's seed + 1: the positions a learner phase of the same seed
    reports its own paired quality on)."""
    positions_from: str | None = None
    """paired, and heldout openings: the games table whose held-out games (sft.heldout_fraction)
    give the positions (default: this run's prepare/games)."""
    name: str = Field("eval", pattern=r"^[A-Za-z0-9_.-]+$")
    """Output folder under <storage>/<run>/evaluate/ (a re-run with the same name resumes)."""
    max_parallel: int | None = Field(None, ge=1)
    """Games in flight at once (default: the cluster's CPUs)."""

    @field_validator("pairs")
    @classmethod
    def _pairs(cls, pairs: list[str]) -> list[str]:
        for pair in pairs:
            if not re.fullmatch(r"\d+-\d+", pair) or len(set(pair.split("-"))) != 2:
                raise ValueError(
                    f"{pair!r} is not I-J: two different player indices (0 is the first), e.g. 0-2"
                )
        return pairs

    @field_validator("opening_plies")
    @classmethod
    def _opening_plies(cls, plies: tuple[int, int]) -> tuple[int, int]:
        lo, hi = plies
        if not 0 <= lo <= hi:
            raise ValueError(f"opening_plies must be 0 <= min <= max, got {lo} {hi}")
        return plies

    @field_validator("elo1")
    @classmethod
    def _sprt_hypotheses(cls, elo1: float, info: ValidationInfo) -> float:
        elo0 = info.data.get("elo0")
        if elo0 is not None and not elo0 < elo1:
            raise ValueError(
                f"elo0 must be below elo1 (--elo0 < --elo1: H0 < H1), got elo0={elo0}, elo1={elo1}"
            )
        return elo1
