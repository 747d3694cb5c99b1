"""chessrl.data.games: stable game ids and the games table's Arrow round trip."""

from __future__ import annotations

import dataclasses
import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from chessrl.data.games import (
    GAMES_SCHEMA,
    GameRecord,
    game_id_for,
    record_as_dict,
    records_to_table,
    table_to_records,
)

ROSTER = {
    "Event": "World Championship",
    "Site": "Astana KAZ",
    "Date": "2023.04.09",
    "Round": "1",
    "White": "Nepomniachtchi, Ian",
    "Black": "Liren, Ding",
    "Result": "1/2-1/2",
}
MOVES = "e2e4 e7e5 g1f3 b8c6"


def record(**changes: object) -> GameRecord:
    base = GameRecord(
        game_id=game_id_for(ROSTER, MOVES),
        source="tests/data/pgn/nepomniachtchi-liren-game1.pgn",
        white="Nepomniachtchi, Ian",
        black="Liren, Ding",
        white_elo=2795,
        black_elo=2788,
        result="1/2-1/2",
        termination="normal",
        eco="C84",
        time_control="40/7200:20/3600:900+30",
        moves=MOVES,
        n_plies=4,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# game_id_for


def test_game_id_is_16_hex_chars_and_pinned() -> None:
    # Pinned: ids written by earlier runs must keep matching. Change this only on purpose.
    assert game_id_for({"White": "Carlsen, Magnus", "Black": "Ding Liren"}, "e2e4 e7e5") == "39fe51001d497ebe"
    game_id = game_id_for(ROSTER, MOVES)
    assert len(game_id) == 16
    assert int(game_id, 16) >= 0


def test_game_id_is_the_same_for_the_same_game_from_another_file() -> None:
    other_file = dict(ROSTER, ECO="C84", WhiteElo="2795", Annotator="someone", PlyCount="97")
    assert game_id_for(other_file, MOVES) == game_id_for(ROSTER, MOVES)
    assert game_id_for(dict(reversed(list(ROSTER.items()))), MOVES) == game_id_for(ROSTER, MOVES)


def test_game_id_ignores_surrounding_whitespace_and_treats_missing_as_empty() -> None:
    padded = {k: f"  {v} " for k, v in ROSTER.items()}
    assert game_id_for(padded, MOVES) == game_id_for(ROSTER, MOVES)
    assert game_id_for({}, MOVES) == game_id_for(dict.fromkeys(ROSTER, ""), MOVES)


@pytest.mark.parametrize("tag", ["Event", "Site", "Date", "Round", "White", "Black", "Result"])
def test_game_id_changes_with_every_roster_tag(tag: str) -> None:
    assert game_id_for(dict(ROSTER, **{tag: ROSTER[tag] + "x"}), MOVES) != game_id_for(ROSTER, MOVES)


def test_game_id_changes_with_the_moves() -> None:
    ids = {
        game_id_for(ROSTER, MOVES),
        game_id_for(ROSTER, "e2e4 e7e5 g1f3 g8f6"),  # one move differs
        game_id_for(ROSTER, "e2e4 e7e5 g1f3"),  # one ply fewer
        game_id_for(ROSTER, ""),
    }
    assert len(ids) == 4


def test_game_id_does_not_mix_up_tags_and_moves() -> None:
    # Moving text from one field into its neighbour must give another id.
    a = game_id_for({"White": "A B", "Black": "C"}, MOVES)
    b = game_id_for({"White": "A", "Black": "B C"}, MOVES)
    c = game_id_for({"Result": "1-0 e2e4"}, "e7e5")
    d = game_id_for({"Result": "1-0"}, "e2e4 e7e5")
    assert a != b
    assert c != d


# ---------------------------------------------------------------------------------------------
# records <-> Arrow


def test_records_round_trip_through_an_arrow_table() -> None:
    records = [record(), record(game_id="0" * 16, moves="d2d4", n_plies=1, result="*")]
    table = records_to_table(records)
    assert table.schema.equals(GAMES_SCHEMA)
    assert table.num_rows == 2
    assert table_to_records(table) == records


def test_schema_columns_match_the_record_fields_in_order() -> None:
    assert GAMES_SCHEMA.names == [f.name for f in dataclasses.fields(GameRecord)]
    assert GAMES_SCHEMA.field("white_elo").type == pa.int32()
    assert GAMES_SCHEMA.field("n_plies").type == pa.int32()
    assert not GAMES_SCHEMA.field("game_id").nullable


def test_nulls_survive_the_round_trip() -> None:
    blank = record(white=None, black=None, white_elo=None, black_elo=None, eco=None, time_control=None)
    table = records_to_table([blank])
    assert table.column("white").null_count == 1
    assert table.column("white_elo").null_count == 1
    assert table.column("time_control").to_pylist() == [None]
    assert table_to_records(table) == [blank]


def test_records_round_trip_through_parquet() -> None:
    records = [record(), record(white=None, white_elo=None, game_id="f" * 16)]
    buffer = io.BytesIO()
    pq.write_table(records_to_table(records), buffer)
    table = pq.read_table(io.BytesIO(buffer.getvalue()))
    assert table.schema.equals(GAMES_SCHEMA)
    assert table_to_records(table) == records


def test_empty_table_keeps_the_schema() -> None:
    table = records_to_table([])
    assert (table.num_rows, table.schema.equals(GAMES_SCHEMA)) == (0, True)
    assert table_to_records(table) == []


def test_table_to_records_ignores_extra_columns_and_order() -> None:
    table = records_to_table([record()])
    shuffled = table.select(list(reversed(table.column_names))).append_column("extra", pa.array([1]))
    assert table_to_records(shuffled) == [record()]


def test_rating_too_large_for_int32_is_rejected() -> None:
    with pytest.raises((pa.ArrowInvalid, OverflowError)):
        records_to_table([record(white_elo=2**31)])


def test_record_as_dict_has_every_column() -> None:
    assert list(record_as_dict(record())) == GAMES_SCHEMA.names
    assert record_as_dict(record())["white_elo"] == 2795
