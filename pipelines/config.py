"""The typed config of every phase: one section per phase beside ``run``, ``ray`` and ``tracking``.

A preset (``configs/tiny.yaml``) holds any subset of these sections; what it leaves out keeps
the defaults below. Each field's docstring is its ``--flag``'s help text.

>>> cfg = ChessRLConfig()
>>> (cfg.run.name, cfg.prepare.min_elo, cfg.prepare.shard_games)
('demo', 0, 2000)
"""

from __future__ import annotations

from pydantic import Field

from chessrl.pgn import TimeControlCategory
from cluster.config import RaySection, RunSection, Section, TrackingSection


class PrepareConfig(Section):
    """``prepare``: PGN files -> the games Parquet table."""

    inputs: list[str] = Field(default_factory=lambda: ["tests/data/pgn"], min_length=1)
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


class ChessRLConfig(Section):
    """The whole config: what a preset file holds."""

    run: RunSection = Field(default_factory=RunSection)
    ray: RaySection = Field(default_factory=RaySection)
    tracking: TrackingSection = Field(default_factory=TrackingSection)
    prepare: PrepareConfig = Field(default_factory=PrepareConfig)
