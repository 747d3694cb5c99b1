"""The data phases' sections: ``prepare`` (PGN files and generated engine games -> the games
table) and ``annotate`` (positions -> Stockfish's value of every legal move)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from chessrl.data.pgn_filters import TimeControlCategory
from cluster.config import ModelPath, Section


class PrepareConfig(Section):
    """``prepare``: PGN files -> the games Parquet table."""

    inputs: list[str] = Field(default_factory=lambda: ["tests/data/pgn"])
    """PGN inputs: files, folders (searched for .pgn/.pgn.zst), globs; local paths, file:// or s3:// URIs.
    The default: the real games shipped in the repository (a Lichess sample, two masters' .pgn.zst,
    PGN edge cases), prepared beside the generated ones; ``--inputs`` with nothing after it leaves
    them out."""
    output: str | None = None
    """Where the games Parquet goes (default: <storage>/<run>/prepare/games)."""
    min_elo: int = Field(0, ge=0)
    """Keep games whose two players are both rated at least this (0: no rating needed)."""
    time_controls: list[TimeControlCategory] = Field(default_factory=list)
    """Keep only these time-control categories (empty: all)."""
    terminations: list[str] = Field(default_factory=list)
    """Keep only these terminations, e.g. checkmate normal time_forfeit (empty: all)."""
    min_plies: int = Field(10, ge=0)
    """Skip games with fewer half-moves than this."""
    max_games: int | None = Field(None, ge=1)
    """Stop after reading this many games (default: read everything)."""
    shard_games: int = Field(1000, ge=1)
    """Games per Parquet file (and per parse task)."""
    parallelism: int | None = Field(None, ge=1)
    """Most parse tasks at once (default: every CPU of the cluster)."""
    generate: int = Field(200, ge=0)
    """Also generate this many Stockfish-vs-Stockfish games through the engine pool (0: none). The
    default is the demo corpus: the same seed gives the same games."""
    generate_nodes: list[int] = Field(default_factory=lambda: [250, 500, 1000, 2000], min_length=1)
    """Node budgets per move; each side of each generated game draws one (its strength)."""
    generate_random_plies: tuple[int, int] = (2, 8)
    """Random legal opening plies per generated game: min max."""
    generate_temperature: tuple[float, float] = (0.0, 0.5)
    """Sampling temperature (pawns) among the engine's best lines; each side draws one in [min, max]."""
    generate_multipv: int = Field(3, ge=1, le=10)
    """Candidate lines per position that generated games sample from."""
    generate_max_plies: int = Field(200, ge=1)
    """A generated game still running after this many plies is a draw."""
    engines: int | None = Field(None, ge=1)
    """Stockfish processes for --generate (default: one per CPU of the cluster)."""

    @model_validator(mode="after")
    def _something_to_do(self) -> PrepareConfig:
        if not self.inputs and self.generate == 0:
            raise ValueError("nothing to prepare: give inputs (PGN files) or generate > 0")
        for name in ("generate_nodes",):
            if any(v < 1 for v in getattr(self, name)):
                raise ValueError(f"{name} must be positive node counts")
        lo, hi = self.generate_random_plies
        if not 0 <= lo <= hi:
            raise ValueError(f"generate_random_plies must be 0 <= min <= max, got {lo} {hi}")
        t_lo, t_hi = self.generate_temperature
        if not 0 <= t_lo <= t_hi:
            raise ValueError(f"generate_temperature must be 0 <= min <= max, got {t_lo} {t_hi}")
        return self


#: Where ``annotate``'s positions come from: the games table's training games, games the policy
#: plays (masked, against a random mover, its start or itself: DAgger), random-mover games, a
#: greedy mover's or Stockfish's games against a random mover.
AnnotateSource = Literal["games", "policy", "random", "lopsided", "engine"]


class AnnotateConfig(Section):
    """``annotate``: positions -> Stockfish's value of every legal move (the annotated table)."""

    games: str | None = None
    """The games table (default: this run's <run>/prepare/games); only its training games give
    training positions (sft's split by game id), its held-out games the held-out positions."""
    policy: ModelPath | None = None
    """The policy whose own games give the ``policy`` source's positions (default: this run's
    board sft model, <run>/sft-board/model)."""
    sources: list[AnnotateSource] = Field(
        default_factory=lambda: ["games", "random", "lopsided"], min_length=1
    )
    """Where training positions come from: games (the games table), policy (the policy's own
    masked games against policy_opponents), random (random-mover games), lopsided (a greedy
    material grabber that mates when it can against a random mover: won positions and near
    mates, what a player must learn to finish a game), engine (Stockfish at 1-100 nodes, a
    random move a tenth of its turns, against a random mover: how an engine wins those). Why
    lopsided by default: what beats a random mover is taking material and mating, and human games
    rarely show a hung queen or a mate in one. Of 2,000 positions each (chessrl.data.positions,
    seed 1): a side 9+ points of material ahead in 83% of lopsided ones against 26% of random-mover
    ones, a mate in one on the board in 18% against 2%."""
    positions: int = Field(8000, ge=1)
    """Training positions from each source."""
    heldout_positions: int = Field(500, ge=0)
    """Positions from the held-out games (for held-out evaluations; never trained on)."""
    nodes: int = Field(100, ge=1)
    """Stockfish nodes for each legal move: one MultiPV search of nodes x legal moves scores them all."""
    engines: int | None = Field(None, ge=1)
    """Stockfish processes, spread over the nodes (default: one per CPU of the cluster)."""
    shard_positions: int = Field(1024, ge=1)
    """Positions per Parquet shard (each written whole; a re-run keeps the written ones)."""
    policy_opponents: list[Literal["random", "self", "start"]] = Field(
        default_factory=lambda: ["random", "self"], min_length=1
    )
    """Who the policy plays for the policy source (games alternate between them; start is the
    policy's own masked argmax)."""
    policy_temperature: float = Field(1.0, gt=0)
    """Sampling temperature of the policy's masked moves in its own games."""
    policy_workers: int = Field(1, ge=1)
    """Ray tasks playing the policy's games at once, one CPU each (the default engines leave them theirs)."""
    max_plies: int = Field(200, ge=1)
    """A policy or random game ends after this many plies (a whole training game too)."""
    whole_games: bool = False
    """Training positions of the games, random and lopsided sources as whole games, every ply in order (the
    moves before each in ``history``), instead of positions drawn by phase: what sft in the moves
    format distils from (one game, one pass, a soft target at every move). Held-out positions
    and the policy source stay drawn."""
    pairs: int = Field(8, ge=0)
    """Preference pairs per position written beside the table (<run>/annotate/pairs/, the
    preference schema: a judge trains on them with ``chess-rl reward --preferences``): half the
    best move against a random legal move, half two moves apart; 0: none."""
    pair_margin_cp: int = Field(50, ge=1)
    """Centipawns two moves of a pair must be apart at least."""
