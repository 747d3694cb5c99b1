"""prepare on the local Ray with real PGN: what it writes, filters, counts, and how it fails."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import chess
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest
import zstandard

from chessrl.data.games import GAMES_SCHEMA
from pipelines import prepare
from pipelines.common.phase import EXIT_EMPTY, EXIT_OK, EXIT_USER_ERROR

pytestmark = pytest.mark.integration


def run(tmp_path: Path, *args: str, run_name: str = "t") -> int:
    return prepare.main(
        [
            "--config",
            "tiny",
            "--storage",
            str(tmp_path / "runs"),
            "--run-name",
            run_name,
            "--no-tracking",
            "--generate",
            "0",  # tiny generates a corpus by default; these tests read PGN
            *args,
        ]
    )


def games(tmp_path: Path, run_name: str = "t"):
    return pads.dataset(tmp_path / "runs" / run_name / "prepare" / "games", format="parquet").to_table()


def summary(tmp_path: Path, run_name: str = "t") -> dict:
    return json.loads((tmp_path / "runs" / run_name / "prepare" / "summary.json").read_text())


def test_prepare_real_games_writes_schema_and_summary(local_ray, tmp_path, pgn_dir, capsys):
    code = run(
        tmp_path,
        "--inputs",
        str(pgn_dir / "masters"),
        str(pgn_dir / "kasparov-deep-blue-1997.pgn"),
        "--shard-games",
        "500",
    )
    assert code == EXIT_OK
    out = capsys.readouterr().out
    assert "prepare summary" in out and "mean plies" in out and "results" in out

    table = games(tmp_path)
    assert table.schema.equals(GAMES_SCHEMA, check_metadata=False)
    s = summary(tmp_path)
    assert table.num_rows == s["games_written"] > 3000
    assert s["games_read"] == s["games_written"] + s["games_skipped"]
    assert len(s["shards"]) >= 4  # several files, none bigger than shard_games
    for shard in s["shards"]:
        assert pq.read_metadata(tmp_path / "runs" / "t" / "prepare" / "games" / shard).num_rows <= 500
    assert s["file_errors"] == []
    assert sum(s["results"].values()) == s["games_written"]

    rows = table.to_pylist()
    assert len({r["game_id"] for r in rows}) > 0.95 * len(rows)  # ids are content hashes
    kasparov = [r for r in rows if r["white"] and "Deep Blue" in (r["white"] + r["black"])]
    assert len(kasparov) == 6
    # Every stored move string replays legally from the start position.
    for row in rows[:: max(1, len(rows) // 200)]:
        board = chess.Board()
        moves = row["moves"].split()
        for uci in moves:
            move = chess.Move.from_uci(uci)
            assert move in board.legal_moves, (row["game_id"], uci)
            board.push(move)
        assert row["n_plies"] == len(moves)


def test_prepare_is_stable_and_replaces_its_own_output(local_ray, tmp_path, pgn_dir):
    inputs = [
        "--inputs",
        str(pgn_dir / "kasparov-deep-blue-1997.pgn"),
        str(pgn_dir / "masters" / "Ding.pgn.zst"),
    ]
    assert run(tmp_path, *inputs) == EXIT_OK
    first = sorted(games(tmp_path).column("game_id").to_pylist())
    files_before = sorted(p.name for p in (tmp_path / "runs/t/prepare/games").iterdir())
    assert run(tmp_path, *inputs) == EXIT_OK
    assert sorted(games(tmp_path).column("game_id").to_pylist()) == first
    assert sorted(p.name for p in (tmp_path / "runs/t/prepare/games").iterdir()) == files_before


def test_filters_elo_time_control_plies_and_max_games(local_ray, tmp_path, pgn_dir):
    lichess = str(pgn_dir / "lichess-2021-10-sample.pgn")
    assert (
        run(
            tmp_path,
            "--inputs",
            lichess,
            "--min-elo",
            "1800",
            "--time-controls",
            "blitz",
            "rapid",
            "--min-plies",
            "30",
        )
        == EXIT_OK
    )
    rows = games(tmp_path).to_pylist()
    assert rows
    assert all(r["white_elo"] >= 1800 and r["black_elo"] >= 1800 for r in rows)
    assert all(r["n_plies"] >= 30 for r in rows)
    minutes = [int(r["time_control"].split("+")[0]) + 40 * int(r["time_control"].split("+")[1]) for r in rows]
    assert all(180 <= m < 1500 for m in minutes)
    skipped = summary(tmp_path)["skipped"]
    assert skipped["elo_below_min"] > 0 and skipped["time_control"] > 0 and skipped["too_short"] > 0

    assert run(tmp_path, "--inputs", lichess, "--max-games", "120", run_name="capped") == EXIT_OK
    assert summary(tmp_path, "capped")["games_read"] == 120


def test_terminations_filter_keeps_only_those(local_ray, tmp_path, pgn_dir):
    assert (
        run(tmp_path, "--inputs", str(pgn_dir / "lichess-2021-10-sample.pgn"), "--terminations", "checkmate")
        == EXIT_OK
    )
    rows = games(tmp_path).to_pylist()
    assert rows and {r["termination"] for r in rows} == {"checkmate"}


# --- bad input: one clear message or a counted skip, never a traceback ---------------------------


def _no_traceback(capsys) -> str:
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "Traceback" not in text
    return text


def test_truncated_and_corrupt_zst_are_counted_not_fatal(local_ray, tmp_path, pgn_dir, capsys):
    data = (pgn_dir / "masters" / "Ding.pgn.zst").read_bytes()
    bad = tmp_path / "in"
    bad.mkdir()
    (bad / "truncated.pgn.zst").write_bytes(data[: len(data) // 2])
    (bad / "corrupt.pgn.zst").write_bytes(b"\x28\xb5\x2f\xfd" + bytes(range(256)) * 40)
    assert run(tmp_path, "--inputs", str(bad)) == EXIT_OK
    text = _no_traceback(capsys)
    s = summary(tmp_path)
    assert s["games_written"] > 500  # the games before the cut are kept
    assert len(s["file_errors"]) == 2
    assert any("truncated.pgn.zst" in e and "truncated" in e for e in s["file_errors"])
    assert any("corrupt.pgn.zst" in e for e in s["file_errors"])
    assert "file error" in text


def test_bad_games_are_skipped_with_reasons(local_ray, tmp_path, capsys):
    src = tmp_path / "bad.pgn"
    src.write_bytes(
        b'[Event "ok"]\n[White "A"]\n[Black "B"]\n[Result "1-0"]\n\n1. e4 e5 2. Qh5 Nc6 3. Bc4 Nf6 4. Qxf7# 1-0\n\n'
        b'[Event "illegal"]\n[White "A"]\n[Black "B"]\n[Result "*"]\n\n1. e4 e5 2. Ke3 Ke6 3. Qxh8 *\n\n'
        b'[Event "latin1"]\n[White "J\xf6rg"]\n[Black "B"]\n[Result "0-1"]\n\n1. f3 e5 2. g4 Qh4# 0-1\n\n'
        b"1. d4 d5 2. c4 e6 3. Nc3 Nf6 *\n\n"
        b'[Event "empty"]\n[Result "*"]\n\n*\n'
    )
    assert run(tmp_path, "--inputs", str(src), "--min-plies", "1") == EXIT_OK
    _no_traceback(capsys)
    s = summary(tmp_path)
    assert s["games_read"] == 5
    assert s["skipped"] == {"illegal_move": 1, "no_moves": 1}
    assert s["recoded_non_utf8"] == 1 and s["missing_headers"] == 1
    assert "illegal san: 'Ke3'" in s["skip_examples"]["illegal_move"]
    rows = {r["white"]: r for r in games(tmp_path).to_pylist()}
    assert rows["Jörg"]["termination"] == "checkmate" and rows["Jörg"]["moves"] == "f2f3 e7e5 g2g4 d8h4"
    assert rows[None]["white_elo"] is None and rows[None]["result"] == "*"


def test_empty_file_writes_nothing_and_says_so(local_ray, tmp_path, capsys):
    (tmp_path / "empty.pgn").write_bytes(b"")
    assert run(tmp_path, "--inputs", str(tmp_path / "empty.pgn")) == EXIT_EMPTY
    text = _no_traceback(capsys)
    assert "wrote no games" in text
    assert summary(tmp_path)["games_read"] == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--inputs", "/no/such/file.pgn"], "no such file or folder: '/no/such/file.pgn'"),
        (["--inputs", "ftp://host/games.pgn"], "unsupported URI scheme 'ftp'"),
        (["--min-elo", "-5"], "prepare.min_elo: -5 is not allowed"),
        (["--set", "prepare.min_elox=5"], "unknown key (did you mean 'min_elo'?)"),
        (["--time-controls", "hyperbullet"], "allowed: ultrabullet, bullet, blitz"),
        (["--config", "nosuchpreset"], "unknown preset 'nosuchpreset'"),
    ],
)
def test_user_mistakes_give_one_clear_line(local_ray, tmp_path, capsys, args, message):
    assert run(tmp_path, *args) == EXIT_USER_ERROR
    err = _no_traceback(capsys)
    assert message in err
    assert err.count("error:") == 1


def test_unknown_key_in_a_config_file_names_the_file(local_ray, tmp_path, capsys):
    cfg = tmp_path / "my.yaml"
    cfg.write_text("extends: tiny\nprepare:\n  min_plys: 10\n")
    code = prepare.main(["--config", str(cfg), "--storage", str(tmp_path), "--no-tracking"])
    assert code == EXIT_USER_ERROR
    err = _no_traceback(capsys)
    assert f"{cfg}: prepare.min_plys: unknown key (did you mean 'min_plies'?)" in err


def test_output_folder_with_foreign_files_is_refused(local_ray, tmp_path, pgn_dir, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    code = run(tmp_path, "--inputs", str(pgn_dir / "molinari-bordais-1979.pgn"), "--output", str(out))
    assert code == EXIT_USER_ERROR
    assert "holds files prepare did not write" in _no_traceback(capsys)
    assert (out / "thesis.tex").read_text() == "precious"


def test_glob_inputs_and_tracking_to_sqlite(local_ray, tmp_path, pgn_dir):
    """Globs expand; with tracking on, a parent and a child MLflow run are recorded locally."""
    import mlflow
    from mlflow.tracking import MlflowClient

    shutil.copy(pgn_dir / "masters" / "Ding.pgn.zst", tmp_path / "a.pgn.zst")
    compressed = zstandard.ZstdCompressor().compress((pgn_dir / "kasparov-deep-blue-1997.pgn").read_bytes())
    (tmp_path / "b.pgn.zst").write_bytes(compressed)
    storage = tmp_path / "runs"
    code = prepare.main(
        [
            "--config",
            "tiny",
            "--generate",
            "0",
            "--storage",
            str(storage),
            "--run-name",
            "tracked",
            "--inputs",
            str(tmp_path / "*.pgn.zst"),
        ]
    )
    assert code == EXIT_OK
    s = json.loads((storage / "tracked" / "prepare" / "summary.json").read_text())
    assert len(s["inputs"]) == 2
    client = MlflowClient(tracking_uri=f"sqlite:///{storage / 'mlflow.db'}")
    exp = client.get_experiment_by_name("chess-rl")
    runs = client.search_runs([exp.experiment_id])
    child = next(r for r in runs if r.data.tags.get("chess_rl.phase") == "prepare")
    parent = next(r for r in runs if r.info.run_id == child.data.tags["mlflow.parentRunId"])
    assert parent.info.run_name == "tracked"
    assert child.data.metrics["games_written"] == s["games_written"]
    assert child.data.params["prepare.min_plies"] == "10"
    mlflow.set_tracking_uri(None)  # leave no global state for other tests
