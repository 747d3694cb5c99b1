"""prepare --generate: Stockfish-vs-Stockfish games through the real engine pool."""

from __future__ import annotations

import io
import json
from pathlib import Path

import chess
import chess.pgn
import pyarrow.dataset as pads
import pytest

from chessrl.data.games import GAMES_SCHEMA
from pipelines import prepare
from pipelines.common.phase import EXIT_OK

pytestmark = pytest.mark.integration

FAST = ["--inputs", "--generate-nodes", "100", "300", "--generate-max-plies", "60", "--engines", "2"]


def generate(tmp_path: Path, run: str, *args: str) -> int:
    return prepare.main(
        ["--config", "tiny", "--storage", str(tmp_path), "--run-name", run, "--no-tracking", *FAST, *args]
    )


def test_generate_is_reproducible_and_writes_games_and_pgn(local_ray, tmp_path, capsys):
    assert generate(tmp_path, "a", "--generate", "6", "--seed", "42") == EXIT_OK
    out = capsys.readouterr().out
    assert "6 generated games" in out and "mean plies" in out and "results" in out
    assert generate(tmp_path, "b", "--generate", "6", "--seed", "42") == EXIT_OK
    assert generate(tmp_path, "c", "--generate", "6", "--seed", "43") == EXIT_OK

    def games(run: str) -> list[dict]:
        table = pads.dataset(tmp_path / run / "prepare" / "games", format="parquet").to_table()
        assert table.schema.equals(GAMES_SCHEMA, check_metadata=False)
        return sorted(table.to_pylist(), key=lambda r: r["game_id"])

    a, b, c = games("a"), games("b"), games("c")
    assert len(a) == 6
    assert [r["moves"] for r in a] == [r["moves"] for r in b]  # same seed, same games
    assert {r["moves"] for r in a} != {r["moves"] for r in c}
    for row in a:
        assert row["source"] == "stockfish"
        assert row["white"].startswith("Stockfish nodes=") and row["black"].startswith("Stockfish nodes=")
        assert row["result"] in ("1-0", "0-1", "1/2-1/2")
        assert row["n_plies"] <= 60

    summary = json.loads((tmp_path / "a" / "prepare" / "summary.json").read_text())
    assert summary["generated"]["games"] == 6 == summary["games_written"]
    pgn = io.StringIO((tmp_path / "a" / "prepare" / "generated.pgn").read_text())
    parsed = []
    while (game := chess.pgn.read_game(pgn)) is not None:
        assert not game.errors
        parsed.append(" ".join(m.uci() for m in game.mainline_moves()))
    assert sorted(parsed) == sorted(r["moves"] for r in a)


def test_generate_and_inputs_together(local_ray, tmp_path, pgn_dir):
    code = generate(
        tmp_path, "mix", "--generate", "2", "--inputs", str(pgn_dir / "kasparov-deep-blue-1997.pgn")
    )
    assert code == EXIT_OK
    rows = pads.dataset(tmp_path / "mix" / "prepare" / "games", format="parquet").to_table().to_pylist()
    assert sorted(r["source"] for r in rows).count("stockfish") == 2
    assert len(rows) == 8


def test_missing_engine_is_one_clear_line(tmp_path, repo):
    import subprocess
    import sys

    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("RAY_")}
    env["STOCKFISH_PATH"] = str(tmp_path / "no-stockfish-here")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.prepare",
            "--config",
            "tiny",
            "--storage",
            str(tmp_path),
            "--no-tracking",
            "--inputs",
            "--generate",
            "2",
        ],
        env=env,
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert (
        f"error: STOCKFISH_PATH='{tmp_path / 'no-stockfish-here'}' is not an executable file" in result.stderr
    )
