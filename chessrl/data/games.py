"""The games table: one row per game, moves in UCI. Written by ``prepare``, read by every phase.

Columns (``GAMES_SCHEMA``):

==============  ========  ===================================================================
column          type      meaning
==============  ========  ===================================================================
game_id         string    16 hex chars, stable: a hash of the seven-tag roster and the moves,
                          so the same game gets the same id in every run and every file
source          string    where it came from: the input file (as given) or ``stockfish``
white, black    string    player names (null when the header is missing or ``?``)
white_elo,      int32     ratings (null when missing or not a number)
black_elo
result          string    ``1-0``, ``0-1``, ``1/2-1/2`` or ``*``
termination     string    how it ended: ``checkmate``, ``stalemate``, ``insufficient_material``,
                          ``seventyfive_moves``, ``fivefold_repetition`` from the final position,
                          else the normalised Termination header (``normal``, ``time_forfeit``,
                          ``abandoned``, ``rules_infraction``, ...), else ``unknown``
eco             string    ECO code (null when missing)
time_control    string    the TimeControl header as given (``300+3``, ``-``; null when missing)
moves           string    the mainline in UCI, space-separated: ``e2e4 e7e5 g1f3``
n_plies         int32     number of half-moves in ``moves``
==============  ========  ===================================================================
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields

import pyarrow as pa

GAMES_SCHEMA = pa.schema(
    [
        pa.field("game_id", pa.string(), nullable=False),
        pa.field("source", pa.string()),
        pa.field("white", pa.string()),
        pa.field("black", pa.string()),
        pa.field("white_elo", pa.int32()),
        pa.field("black_elo", pa.int32()),
        pa.field("result", pa.string()),
        pa.field("termination", pa.string()),
        pa.field("eco", pa.string()),
        pa.field("time_control", pa.string()),
        pa.field("moves", pa.string()),
        pa.field("n_plies", pa.int32()),
    ]
)

RESULTS = ("1-0", "0-1", "1/2-1/2", "*")


@dataclass(frozen=True)
class GameRecord:
    """One row of the games table (see the module docstring for each column)."""

    game_id: str
    source: str
    white: str | None
    black: str | None
    white_elo: int | None
    black_elo: int | None
    result: str
    termination: str
    eco: str | None
    time_control: str | None
    moves: str
    n_plies: int


def game_id_for(headers: Mapping[str, str], moves: str) -> str:
    """A stable id: same roster and moves -> same id, whichever file or run it came from.

    >>> game_id_for({"White": "Carlsen, Magnus", "Black": "Ding Liren"}, "e2e4 e7e5")
    '39fe51001d497ebe'
    """
    roster = "\x1f".join(
        (headers.get(tag) or "").strip()
        for tag in ("Event", "Site", "Date", "Round", "White", "Black", "Result")
    )
    return hashlib.blake2b(f"{roster}\x1e{moves}".encode(), digest_size=8).hexdigest()


def records_to_table(records: Sequence[GameRecord]) -> pa.Table:
    """Rows -> an Arrow table with ``GAMES_SCHEMA``."""
    columns = {f.name: [getattr(r, f.name) for r in records] for f in fields(GameRecord)}
    return pa.Table.from_pydict(columns, schema=GAMES_SCHEMA)


def table_to_records(table: pa.Table) -> list[GameRecord]:
    """An Arrow table (or Parquet file read back) -> rows."""
    names = [f.name for f in fields(GameRecord)]
    return [GameRecord(**{n: row[n] for n in names}) for row in table.select(names).to_pylist()]


def record_as_dict(record: GameRecord) -> dict[str, object]:
    return asdict(record)
