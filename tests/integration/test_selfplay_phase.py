"""selfplay on the local Ray: collectors, the parameter server, replay shards through Ray Data into a
Ray Train learner, gating, checkpoints, and a collector killed mid-run."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import threading
import time
from pathlib import Path

import chess
import chess.pgn
import pyarrow.parquet as pq
import pytest
import torch

from chessrl.search.network import NetConfig, PolicyValueNet
from chessrl.search.replay import REPLAY_SCHEMA
from pipelines import selfplay
from pipelines.common.phase import EXIT_OK, EXIT_USER_ERROR
from pipelines.learner.replay import DONE

pytestmark = pytest.mark.integration

SMALL = [
    "--config",
    "tiny",
    "--no-tracking",
    "--concurrent-games",
    "4",
    "--mcts-simulations",
    "4",
    "--max-plies",
    "24",
    "--shard-positions",
    "32",
    "--batch-size",
    "16",
    "--train-ratio",
    "1",
    "--gate-games",
    "2",
    "--gate-max-plies",
    "12",
    "--eval-games",
    "2",
    "--eval-max-plies",
    "16",
    "--blocks",
    "1",
    "--channels",
    "8",
    "--checkpoint-interval",
    "2",
    "--set",
    "selfplay.time_limit_minutes=null",
]


def run_selfplay(storage: Path, run: str, *args: str) -> int:
    return selfplay.main(["--storage", str(storage), "--run-name", run, *SMALL, *args])


def kill_collector_after(status: Path, shards: int, killed: dict[str, int], timeout: float = 240.0) -> None:
    """Background thread: once collector 0 has written ``shards`` shards, SIGKILL its process."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            record = json.loads(status.read_text())
        except (OSError, ValueError):
            record = {}
        if record.get("next_shard", 0) >= shards and record.get("state") == "running":
            os.kill(int(record["pid"]), signal.SIGKILL)
            killed.update(pid=int(record["pid"]), shards_before=int(record["next_shard"]))
            return
        time.sleep(0.2)


@pytest.mark.slow
def test_collector_killed_mid_run_restarts_and_training_goes_on(tmp_path, local_ray, capsys):
    phase = tmp_path / "k" / "selfplay"
    killed: dict[str, int] = {}
    killer = threading.Thread(
        target=kill_collector_after, args=(phase / "collectors" / "collector-00.json", 2, killed), daemon=True
    )
    killer.start()
    # the learner reads the replay window through the Ray Data stream (selfplay.replay_reader's default)
    code = run_selfplay(
        tmp_path,
        "k",
        "--producer-workers",
        "1",
        "--iterations",
        "6",
        "--episodes",
        "2",
    )
    killer.join(timeout=1)
    assert code == EXIT_OK
    assert killed, "the collector was never seen running with 2 shards written"
    assert (phase / "replay" / DONE).exists()  # the lead ended the stream

    summary = json.loads((phase / "summary.json").read_text())
    # the learner finished every iteration, with games from after the restart
    assert summary["iterations"] == 6 and summary["games"] >= 12
    assert summary["collector_restarts"] >= 1
    status = json.loads((phase / "collectors" / "collector-00.json").read_text())
    assert status["starts"] >= 2 and status["pid"] != killed["pid"]

    # every shard is whole: the schema, exactly shard_positions rows, and no leftover temporary file
    shards = sorted((phase / "replay").rglob("shard-*.parquet"))
    assert len(shards) >= 6
    numbers = sorted(int(p.stem.rsplit("-", 1)[1]) for p in shards)
    # the restarted collector went on from its last shard: numbers run 0..n-1, none written twice
    assert numbers == list(range(len(shards))), numbers
    for path in shards:
        table = pq.read_table(path)
        assert table.schema.equals(REPLAY_SCHEMA, check_metadata=False)
        assert table.num_rows == 32
        assert all(abs(sum(p) - 1.0) < 1e-4 for p in table["policy_probs"].to_pylist())
    assert not [p for p in (phase / "replay").rglob("*") if p.is_file() and p.name.startswith(".")]
    # games of the restarted collector are stamped with its new start
    ids = {g for path in shards for g in pq.read_table(path, columns=["game_id"])["game_id"].to_pylist()}
    assert any(g.startswith("c0-s1-") for g in ids) and any(g.startswith("c0-s2-") for g in ids)

    # learner outputs: a checkpoint every 2 iterations, metrics per iteration, TensorBoard, gates
    checkpoints = sorted((phase / "checkpoints").glob("k_step*.pt"))
    assert len(checkpoints) >= 3
    saved = torch.load(checkpoints[-1], map_location="cpu", weights_only=False)
    assert saved["state"]["iteration"] == 6
    PolicyValueNet(NetConfig(**saved["net"])).load_state_dict(saved["model"])
    metrics = [json.loads(line) for line in (phase / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert [m["iteration"] for m in metrics] == [1, 2, 3, 4, 5, 6]
    assert sum("gate_score" in m for m in metrics) == 3
    assert all(m["loss"] > 0 and m["new_positions"] > 0 for m in metrics)
    assert list((phase / "logs").glob("events.out.tfevents.*"))

    # the final evaluation: PGN that parses, results per opponent
    results = json.loads((phase / "eval" / "results.json").read_text())
    assert results["random"]["games"] == 2 and results["gen0"]["games"] == 2
    pgn = io.StringIO((phase / "eval" / "games.pgn").read_text())
    games = [g for g in iter(lambda: chess.pgn.read_game(pgn), None)]
    assert len(games) == 4
    captured = capsys.readouterr()
    out = captured.out
    assert "selfplay summary" in out
    assert f"{summary['collector_restarts']} restart(s)" in out
    # the driver names every iteration in a progress line (Ray worker lines are not on its stderr)
    progress = re.findall(
        r"^\[selfplay\] iteration (\d+)/6 \(\d+%\), \d+:\d\d elapsed.*: (.*)$", captured.err, re.M
    )
    assert [int(i) for i, _ in progress] == [1, 2, 3, 4, 5, 6], captured.err[-3000:]
    assert all("games" in figures and "loss" in figures for _, figures in progress)
    assert sum("gate +" in figures for _, figures in progress) == 3  # a gate every 2 iterations


@pytest.mark.slow
def test_learner_plays_its_own_games_without_producers_and_resumes(tmp_path, local_ray, capsys, driver_err):
    args = ["--producer-workers", "0", "--episodes", "2", "--checkpoint-interval", "1", "--eval-games", "0"]
    # the Ray Data stream (the default): a resumed stream goes on (the last run's end marker is gone)
    assert run_selfplay(tmp_path, "p", *args, "--iterations", "2") == EXIT_OK
    phase = tmp_path / "p" / "selfplay"
    summary = json.loads((phase / "summary.json").read_text())
    assert (summary["iterations"], summary["games"]) == (2, 4)
    assert sorted(p.name for p in (phase / "replay").rglob("*.parquet"))[0].startswith("shard-99-")
    # the same command with more iterations resumes the learner from its Ray Train checkpoint
    capsys.readouterr()
    assert run_selfplay(tmp_path, "p", *args, "--iterations", "3") == EXIT_OK
    assert re.findall(r"^\[selfplay\] iteration (\d)/3 \(", capsys.readouterr().err, re.M) == ["3"]
    summary = json.loads((phase / "summary.json").read_text())
    assert (summary["iterations"], summary["games"]) == (3, 6)
    metrics = [json.loads(line) for line in (phase / "logs" / "metrics.jsonl").read_text().splitlines()]
    assert [m["iteration"] for m in metrics] == [1, 2, 3]
    # resuming with another network shape is one clear error, not a half-loaded network
    capsys.readouterr()
    assert run_selfplay(tmp_path, "p", *args, "--iterations", "3", "--channels", "16") == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert "Traceback" not in driver_err(err) and "gen0.pt" in err and "another --run-name" in err
