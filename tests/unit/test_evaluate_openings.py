"""``evaluate``'s openings and training opponents, without Ray: held-out openings from the games
table (``--positions-from``, else the run's prepare/games), seeded by ``--seed``; random ones with
one log line saying why and how to choose where there is no table; the record results.json keeps;
whom a grpo model played in its own games, and the note when an SPRT meets one of them."""

from __future__ import annotations

import json
import random
from pathlib import Path

import chess
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from chessrl.arena.players import parse_player_spec
from cluster.storage import Storage
from pipelines import evaluate
from pipelines.common.phase import Inputs
from pipelines.config import ChessRLConfig
from pipelines.evaluate_opponents import in_distribution_notes, training_opponents

RUN = "r"


def games_table(folder: Path, n: int = 8) -> list[dict[str, str]]:
    """``n`` seeded random games of 30 plies; even ones held out at any fraction (id 00000000..)."""
    rng = random.Random(0)
    rows = []
    for i in range(n):
        board = chess.Board()
        while board.ply() < 30 and not board.is_game_over():
            board.push(rng.choice(sorted(board.legal_moves, key=lambda m: m.uci())))
        game_id = f"{'00000000' if i % 2 == 0 else 'ffffffff'}{i:08x}"
        rows.append({"game_id": game_id, "moves": " ".join(m.uci() for m in board.move_stack)})
    folder.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), folder / "part-0.parquet")
    return rows


def config(tmp_path: Path, seed: int = 7, **evaluate_keys: object) -> ChessRLConfig:
    keys = {"players": ["random", "stockfish:skill=0"], "suites": [], "games": 6, **evaluate_keys}
    return ChessRLConfig.model_validate(
        {"run": {"storage": str(tmp_path), "name": RUN, "seed": seed}, "evaluate": keys}
    )


def openings_of(cfg: ChessRLConfig) -> tuple[list, dict, list[str]]:
    lines: list[str] = []
    found = evaluate.check_evaluate(cfg, Inputs(Storage.from_uri(cfg.run.storage).child(RUN)))
    openings, record = evaluate.arena_openings(cfg, found, lines.append)
    return openings, record, lines


def test_openings_are_seeded_prefixes_of_the_held_out_games_of_positions_from(tmp_path) -> None:
    rows = games_table(tmp_path / "games")
    held = [r["moves"] for r in rows if r["game_id"].startswith("0")]
    openings, record, lines = openings_of(config(tmp_path, positions_from=str(tmp_path / "games")))
    assert record == {
        "source": "heldout",
        "seed": 7,
        "plies": [6, 12],
        "from": str(tmp_path / "games"),
        "count": 3,
    }
    assert lines == [f"openings: 3 positions at plies 6-12 of held-out games of {tmp_path / 'games'}, seed 7"]
    for o in openings:
        assert 6 <= len(o.moves) <= 12 and sum(m.startswith(" ".join(o.moves)) for m in held) == 1
    assert openings == openings_of(config(tmp_path, positions_from=str(tmp_path / "games")))[0]
    assert openings != openings_of(config(tmp_path, seed=8, positions_from=str(tmp_path / "games")))[0]
    plies = openings_of(config(tmp_path, positions_from=str(tmp_path / "games"), opening_plies=(2, 2)))[0]
    assert {len(o.moves) for o in plies} == {2}


def test_the_runs_games_table_is_the_default_and_without_one_openings_are_random(tmp_path) -> None:
    openings, record, lines = openings_of(config(tmp_path))  # no run: random, said once
    table = tmp_path / RUN / "prepare" / "games"
    assert record == {
        "source": "random",
        "seed": 7,
        "plies": 4,
        "from": None,
        "count": 3,
        "fallback": f"no games table at {table}",
    }
    assert len(lines) == 1 and f"no games table at {table}" in lines[0]
    assert "--positions-from TABLE" in lines[0] and "--set evaluate.opening_source=random" in lines[0]
    assert all(len(o.moves) == 4 for o in openings)
    _, asked, quiet = openings_of(config(tmp_path, opening_source="random"))
    assert asked == {"source": "random", "seed": 7, "plies": 4, "from": None, "count": 3} and quiet == []
    games_table(table)
    _, record, _ = openings_of(config(tmp_path))
    assert record["source"] == "heldout" and record["from"] == str(table)
    _, record, lines = openings_of(config(tmp_path, opening_plies=(40, 50)))  # every game is shorter
    assert record["source"] == "random" and "4 of its 8 games held out" in record["fallback"]
    assert len(lines) == 1 and "none playable at plies 40-50" in lines[0]
    book = tmp_path / "book.epd"
    book.write_text("4k3/8/8/8/8/8/4P3/4K3 w - - 0 1\n")
    _, record, lines = openings_of(config(tmp_path, openings=str(book)))
    assert record == {"source": "book", "seed": 7, "plies": None, "from": str(book), "count": 1} and not lines


def grpo_run(tmp_path: Path, record: dict | None, sft: str | None = "sft-board") -> Path:
    """A run folder with a grpo model, the record beside it, and (``sft``) that sft model."""
    run = tmp_path / "run"
    for folder in ("grpo/model", f"{sft}/model") if sft else ("grpo/model",):
        (run / folder).mkdir(parents=True)
        (run / folder / "config.json").write_text("{}")
    if record is not None:
        (run / "grpo" / "phase-config.json").write_text(json.dumps(record))
    return run


@pytest.mark.parametrize(
    ("record", "sft", "expected"),
    [
        (None, "sft-board", []),
        ({"grpo.own_positions": 0.0, "grpo.own_opponent": "random"}, "sft-board", []),
        ({"grpo.own_positions": 0.25, "grpo.own_opponent": "self"}, "sft-board", ["self"]),
        (
            {
                "grpo.own_positions": 0.25,
                "grpo.own_opponent": "random+start",
                "grpo.text_format": "board",
                "grpo.policy": None,
            },
            "sft-board",
            ["random", "lm:{run}/sft-board/model"],
        ),
        (
            {"grpo.own_positions": 0.25, "grpo.own_opponent": "start", "grpo.text_format": "board"},
            None,
            ["start"],
        ),
        (
            {"grpo.own_positions": 0.5, "grpo.own_opponent": "start", "grpo.policy": "/elsewhere/model"},
            None,
            ["lm:/elsewhere/model"],
        ),
        ("not a record", None, []),
    ],
)
def test_training_opponents_from_the_phase_record(tmp_path, record, sft, expected) -> None:
    run = grpo_run(tmp_path, record, sft)
    assert training_opponents(str(run / "grpo" / "model")) == [e.replace("{run}", str(run)) for e in expected]
    assert training_opponents(str(tmp_path / "nowhere" / "model")) == []


def test_an_sprt_against_the_training_opponent_says_it_is_partly_in_distribution(tmp_path) -> None:
    run = grpo_run(
        tmp_path,
        {"grpo.own_positions": 0.25, "grpo.own_opponent": "random+start", "grpo.text_format": "moves"},
        sft="sft",
    )
    grpo = parse_player_spec(f"lm:{run}/grpo/model")
    opponents = {grpo.label: training_opponents(str(run / "grpo" / "model"))}
    assert opponents[grpo.label] == ["random", f"lm:{run}/sft/model"]
    note = f"note: {grpo.label} trained against {{}} (its own-games opponent): this match is partly in-distribution"
    start = parse_player_spec(f"lm:{run}/grpo/../sft/model,masked")  # the same folder, another spelling
    assert in_distribution_notes([start, grpo], opponents) == [note.format(start.label)]
    assert in_distribution_notes([grpo, parse_player_spec("random")], opponents) == [note.format("random")]
    sft = parse_player_spec("sft")
    assert in_distribution_notes([grpo, sft], opponents, str(run / "sft" / "model")) == [note.format("sft")]
    assert in_distribution_notes([grpo, parse_player_spec("stockfish:skill=0")], opponents) == []
    lines: list[str] = []
    found = evaluate.trained_against([grpo, parse_player_spec("random")], None, True, lines.append)
    assert found == {"training_opponents": opponents, "notes": [note.format("random")]}
    assert lines == found["notes"]
    quiet = evaluate.trained_against([grpo, sft], None, False, lines.append)
    assert quiet == {"training_opponents": opponents} and len(lines) == 1
