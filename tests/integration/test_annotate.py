"""annotate with real Stockfish: every legal move of a position gets a value in one search (a mate
in one first, a stalemating move a draw, a hanging queen taken), the phase writes whole shards on
the local Ray that list every legal move, a re-run keeps them and a re-run with other settings is
refused; the policy source plays the policy's own games; bad input is one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import chess
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from chessrl.engine.annotation import ALL_MOVES_MULTIPV, ANNOTATION_SCHEMA, annotate, annotation_limit
from chessrl.engine.group import EngineGroup
from pipelines import annotate as annotate_phase
from pipelines.common.phase import EXIT_OK, EXIT_USER_ERROR

pytestmark = pytest.mark.integration


def _annotated(group: EngineGroup, fen: str, nodes: int = 200):
    board = chess.Board(fen)
    [analysis] = group.analyse([board], annotation_limit(board, nodes), multipv=ALL_MOVES_MULTIPV, fresh=True)
    return annotate(board, analysis)


def test_one_search_values_every_legal_move():
    with EngineGroup(1) as group:
        mate = _annotated(group, "6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1")  # Rd8#
        board = chess.Board(mate.fen)
        assert set(mate.moves) == {m.uci() for m in board.legal_moves} and mate.unscored == 0
        assert mate.best_move == "d1d8" and mate.cp[0] == 99_999 and mate.value_expected == 1.0
        assert max(mate.cp[1:]) < 1000  # nothing else mates
        # Qg6 stalemates a lone king that Qf7-g7 would not: the stalemate is a draw, far below the win
        stale = _annotated(group, "7k/8/5K2/8/8/8/8/6Q1 w - - 0 1")
        values = dict(zip(stale.moves, stale.cp, strict=True))
        assert values["g1g6"] == 0 and stale.value_cp > 5000
        hanging = _annotated(group, "4k3/8/8/3q4/4P3/8/8/R3K3 w - - 0 1")
        assert hanging.best_move == "e4d5" and hanging.cp[0] > 500
        assert _annotated(group, "7k/5Q2/6K1/8/8/8/8/8 b - - 0 1").terminal == "stalemate"


def _args(storage: Path, *extra: str) -> list[str]:
    return ["--config", "tiny", "--storage", str(storage), "--run-name", "a", "--no-tracking", *extra]


def _rows(folder: Path) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for shard in sorted(folder.glob("*/*.parquet")):
        table = pq.read_table(shard)
        assert table.schema.equals(ANNOTATION_SCHEMA)
        out.setdefault(shard.parent.name, []).extend(table.to_pylist())
    return out


@pytest.fixture(scope="module")
def games(tmp_path_factory) -> Path:
    """Sixty distinct 30-ply games (random movers': only distinct move lists, with ids, matter)."""
    import hashlib
    import random

    folder = tmp_path_factory.mktemp("ann-games")
    rng, texts = random.Random(5), []
    for _ in range(60):
        board, moves = chess.Board(), []
        while len(moves) < 30 and not board.is_game_over():
            moves.append(rng.choice(sorted(m.uci() for m in board.legal_moves)))
            board.push_uci(moves[-1])
        texts.append(" ".join(moves))
    ids = [
        hashlib.sha1(t.encode()).hexdigest()[:16] for t in texts
    ]  # content ids, as prepare's: ~5% held out
    pq.write_table(
        pa.table({"game_id": ids, "moves": texts, "result": ["*"] * len(texts)}), folder / "part-0.parquet"
    )
    return folder


def _annotate_args(root: Path, games: Path) -> list[str]:
    return _args(
        root,
        "--games",
        str(games),
        "--positions",
        "12",
        "--heldout-positions",
        "4",
        "--shard-positions",
        "8",
        "--nodes",
        "20",
    )


@pytest.fixture(scope="module")
def annotated(tmp_path_factory, local_ray, games) -> Path:
    """One annotate run (12 positions from each of games, random and lopsided: the tiny preset's
    sources; 4 held out): its storage."""
    root = tmp_path_factory.mktemp("annotated")
    assert annotate_phase.main(_annotate_args(root, games)) == EXIT_OK
    return root


def test_the_phase_writes_every_legal_move_resumes_and_refuses_other_settings(annotated, games, capsys):
    tmp_path, args = annotated, _annotate_args(annotated, games)
    out = tmp_path / "a" / "annotate"
    rows = _rows(out)
    assert {k: len(v) for k, v in rows.items()} == {"train": 36, "heldout": 4}
    assert sorted({r["source"] for r in rows["train"]}) == ["games", "lopsided", "random"]
    for row in rows["train"] + rows["heldout"]:
        board = chess.Board(row["fen"])
        assert sorted(row["moves"]) == sorted(m.uci() for m in board.legal_moves), row["fen"]
        assert row["cp"] == sorted(row["cp"], reverse=True) and row["best_move"] == row["moves"][0]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["positions_total"] == 40 and summary["made_now"] == 40
    board = lambda fen: " ".join(fen.split()[:4])  # noqa: E731
    assert not {board(r["fen"]) for r in rows["heldout"]} & {board(r["fen"]) for r in rows["train"]}
    # the judge's pairs beside them: the preference schema, the chosen move the better by the margin
    pairs = {split: pq.read_table(out / "pairs" / split).to_pylist() for split in ("train", "heldout")}
    assert (
        pairs["train"]
        and pairs["heldout"]
        and summary["pairs_total"] == len(pairs["train"]) + len(pairs["heldout"])
    )
    for pair in pairs["train"] + pairs["heldout"]:
        legal = {m.uci() for m in chess.Board(pair["fen"]).legal_moves}
        assert {pair["chosen"].strip(), pair["rejected"].strip()} <= legal
        assert pair["chosen_score"] - pair["rejected_score"] >= 50 and pair["kind"] in ("random", "ranked")
    assert {p["source"] for p in pairs["heldout"]} == {"heldout"}
    capsys.readouterr()
    # the same command again: every shard kept, nothing made
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("*/*.parquet")}
    assert annotate_phase.main(args) == EXIT_OK
    assert "(7 already written, 0 to make)" in capsys.readouterr().err
    assert stamps == {p: p.stat().st_mtime_ns for p in out.glob("*/*.parquet")}
    # other settings into the same folder: one line, nothing touched
    assert annotate_phase.main([*args, "--nodes", "30"]) == EXIT_USER_ERROR
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("error: ") and "nodes" in line and "--run-name" in line, line


@pytest.mark.slow
def test_sft_distils_the_annotations_into_a_board_policy(annotated, games, capsys):
    """Two steps of sft --annotations (the annotate run's table twice, as a DAgger round's would be
    added): the soft targets reach the loss (soft_loss logged), the model is saved in the board format."""
    from pipelines import sft

    table = str(annotated / "a" / "annotate")
    code = sft.main(
        _args(
            annotated,
            "--games",
            str(games),
            "--text-format",
            "board",
            "--annotations",
            table,
            table,
            "--max-steps",
            "2",
            "--eval-every",
            "2",
            "--batch-size",
            "2",
            "--max-length",
            "160",
            "--set",
            "sft.heldout_positions=4",
        )
    )
    err = capsys.readouterr().err
    assert code == EXIT_OK, err[-3000:]
    assert "distilling 72 annotated positions and their colour flips" in err, err[-3000:]
    summary = json.loads((annotated / "a" / "sft-board" / "summary.json").read_text())
    assert summary["annotated_positions"] == 72 and summary["steps"] == 2
    config = json.loads((annotated / "a" / "sft-board" / "model" / "config.json").read_text())
    assert config["chessrl_text_format"] == "board"


@pytest.mark.slow
def test_whole_games_distil_into_a_moves_policy(local_ray, tmp_path, games, capsys):
    """annotate --whole-games writes every ply of a game in order (its history the moves before),
    and sft --text-format moves distils them: one sequence a game, a soft target at every ply."""
    from pipelines import sft

    args = _args(
        tmp_path,
        "--games",
        str(games),
        "--whole-games",
        "--sources",
        "games",
        "random",
        "--positions",
        "40",
        "--heldout-positions",
        "0",
        "--nodes",
        "10",
        "--max-plies",
        "16",
        "--pairs",
        "0",
    )
    assert annotate_phase.main(args) == EXIT_OK
    rows = _rows(tmp_path / "a" / "annotate")["train"]
    for source in ("games", "random"):
        first = [r for r in rows if r["source"] == source][:17]
        assert [r["ply"] for r in first] == list(range(17)) and len({r["game_id"] for r in first}) == 1
        for row in first:
            board = chess.Board()
            for move in row["history"].split():
                board.push_uci(move)
            assert board.fen() == row["fen"]
    table = str(tmp_path / "a" / "annotate")
    code = sft.main(
        _args(
            tmp_path,
            "--games",
            str(games),
            "--text-format",
            "moves",
            "--annotations",
            table,
            "--max-steps",
            "2",
            "--eval-every",
            "2",
            "--batch-size",
            "2",
            "--max-length",
            "64",
            "--set",
            "sft.heldout_positions=4",
        )
    )
    err = capsys.readouterr().err
    assert code == EXIT_OK, err[-3000:]
    assert "distilling 80 annotated positions (whole games" in err, err[-3000:]
    assert "beside them 59 training games (the played moves, hard targets)" in err, err[-3000:]
    summary = json.loads((tmp_path / "a" / "sft" / "summary.json").read_text())
    assert summary["annotated_positions"] == 80 and summary["steps"] == 2
    # the board format's flip has no meaning for a game from the start; a table without histories is refused
    (tmp_path / "old" / "train").mkdir(parents=True)
    pq.write_table(
        pq.read_table(tmp_path / "a" / "annotate" / "train").drop(["history"]),
        tmp_path / "old" / "train" / "part-0.parquet",
    )
    code = sft.main(
        _args(
            tmp_path,
            "--games",
            str(games),
            "--text-format",
            "moves",
            "--annotations",
            str(tmp_path / "old"),
            "--max-steps",
            "1",
        )
    )
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == EXIT_USER_ERROR and "history" in line and "--whole-games" in line, line


def test_the_policy_source_plays_the_policy_s_own_games(local_ray, tmp_path, games, tiny_lm_dir):
    args = _args(
        tmp_path,
        "--games",
        str(games),
        "--sources",
        "policy",
        "--policy",
        str(tiny_lm_dir),
        "--positions",
        "10",
        "--heldout-positions",
        "0",
        "--nodes",
        "10",
        "--max-plies",
        "40",
    )
    assert annotate_phase.main(args) == EXIT_OK
    rows = _rows(tmp_path / "a" / "annotate")["train"]
    assert len(rows) == 10 and {r["source"] for r in rows} == {"policy"}
    opening = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1"
    assert all(r["fen"] != opening and r["moves"] for r in rows)  # continued from the games, not the start


def test_bad_input_is_one_line(tmp_path, capsys, games):
    no_moves = tmp_path / "no-moves"
    no_moves.mkdir()
    pq.write_table(pa.table({"game_id": ["a"], "result": ["1-0"]}), no_moves / "part-0.parquet")

    def line(*extra: str) -> str:
        code = annotate_phase.main(_args(tmp_path, *extra))
        err = capsys.readouterr().err
        assert code == EXIT_USER_ERROR and "Traceback" not in err, err
        return err.strip().splitlines()[-1]

    assert "annotate.nodes" in line("--nodes", "0")
    assert "annotate.nodes" in line("--nodes", "-5")
    said = line("--games", str(no_moves))
    assert "no column moves" in said and str(no_moves) in said, said
    said = line("--sources", "games", "stockfish")
    assert "annotate.sources" in said and "random" in said, said
    said = line("--sources", "policy", "--policy", str(tmp_path / "nowhere"), "--games", str(games))
    assert "annotate.policy" in said, said
    said = line("--sources", "random", "--heldout-positions", "0", "--engines", "0")
    assert "annotate.engines" in said, said
    said = line("--sources", "engine", "--whole-games", "--heldout-positions", "0")
    assert "annotate.sources" in said and "whole_games" in said, said
    assert not (tmp_path / "a" / "annotate").exists()  # nothing written
