"""``prepare``'s section: PGN files (and generated engine games) -> the games table."""

from __future__ import annotations

from pydantic import Field, model_validator

from chessrl.data.pgn_filters import TimeControlCategory
from cluster.config import Section


class PrepareConfig(Section):
    """``prepare``: PGN files -> the games Parquet table."""

    inputs: list[str] = Field(default_factory=lambda: ["tests/data/pgn"])
    """PGN inputs: files, folders (searched for .pgn/.pgn.zst), globs; local paths, file:// or s3:// URIs."""
    output: str | None = None
    """Where the games Parquet goes (default: <storage>/<run>/prepare/games)."""
    min_elo: int = Field(0, ge=0)
    """Keep games whose two players are both rated at least this (0: no rating needed)."""
    time_controls: list[TimeControlCategory] = Field(default_factory=list)
    """Keep only these time-control categories (empty: all)."""
    terminations: list[str] = Field(default_factory=list)
    """Keep only these terminations, e.g. checkmate normal time_forfeit (empty: all)."""
    min_plies: int = Field(1, ge=0)
    """Skip games with fewer half-moves than this."""
    max_games: int | None = Field(None, ge=1)
    """Stop after reading this many games (default: read everything)."""
    shard_games: int = Field(2000, ge=1)
    """Games per Parquet file (and per parse task)."""
    parallelism: int | None = Field(None, ge=1)
    """Most parse tasks at once (default: every CPU of the cluster)."""
    generate: int = Field(0, ge=0)
    """Also generate this many Stockfish-vs-Stockfish games through the engine pool (0: none)."""
    generate_nodes: list[int] = Field(default_factory=lambda: [500, 1000, 2000, 4000], min_length=1)
    """Node budgets per move; each side of each generated game draws one (its strength)."""
    generate_random_plies: tuple[int, int] = (2, 8)
    """Random legal opening plies per generated game: min max."""
    generate_temperature: tuple[float, float] = (0.0, 0.5)
    """Sampling temperature (pawns) among the engine's best lines; each side draws one in [min, max]."""
    generate_multipv: int = Field(3, ge=1, le=10)
    """Candidate lines per position that generated games sample from."""
    generate_max_plies: int = Field(240, ge=1)
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
