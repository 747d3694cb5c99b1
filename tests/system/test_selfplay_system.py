"""selfplay with everything on S3 (moto_server): replay shards, checkpoints, logs and the Ray Train
checkpoints of the learner, through a real S3 HTTP endpoint."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from chessrl.search.replay import REPLAY_SCHEMA

pytestmark = pytest.mark.system


def test_selfplay_writes_everything_to_s3(s3, moto_s3, tmp_path, repo):
    s3.create_bucket(Bucket="selfplay-runs")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.selfplay",
            "--config",
            "tiny",
            "--storage",
            "s3://selfplay-runs/runs",
            "--run-name",
            "sp",
            "--no-tracking",
            "--producer-workers",
            "1",
            "--replay-reader",
            "parquet",  # the other reader (the integration tier runs the stream, the default)
            "--iterations",
            "2",
            "--episodes",
            "2",
            "--concurrent-games",
            "4",
            "--mcts-simulations",
            "4",
            "--max-plies",
            "20",
            "--shard-positions",
            "32",
            "--batch-size",
            "16",
            "--gate-games",
            "2",
            "--gate-max-plies",
            "10",
            "--eval-games",
            "2",
            "--eval-max-plies",
            "10",
            "--blocks",
            "1",
            "--channels",
            "8",
            "--checkpoint-interval",
            "2",
            "--set",
            "selfplay.time_limit_minutes=null",
            "--set",
            "ray.num_cpus=2",
        ],
        env=moto_s3.env,
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (
        "selfplay summary" in result.stdout and "s3://selfplay-runs/runs/sp/selfplay/best.pt" in result.stdout
    )
    assert "testing-secret" not in result.stdout + result.stderr

    def get(key: str) -> bytes:
        return s3.get_object(Bucket="selfplay-runs", Key=f"runs/sp/selfplay/{key}")["Body"].read()

    keys = [
        o["Key"] for o in s3.list_objects_v2(Bucket="selfplay-runs", Prefix="runs/sp/selfplay/")["Contents"]
    ]
    names = {k.split("runs/sp/selfplay/", 1)[1] for k in keys}
    assert {"gen0.pt", "best.pt", "final.pt", "summary.json", "logs/metrics.jsonl", "eval/games.pgn"} <= names
    assert any(n.startswith("checkpoints/sp_step") for n in names)
    assert any(n.startswith("logs/events.out.tfevents.") for n in names)
    assert any(n.startswith("ray/sp-selfplay/checkpoint_") for n in names)
    shards = sorted(n for n in names if n.startswith("replay/") and n.endswith(".parquet"))
    assert shards
    for name in shards:
        table = pq.read_table(io.BytesIO(get(name)))
        assert table.schema.equals(REPLAY_SCHEMA, check_metadata=False) and table.num_rows == 32
    summary = json.loads(get("summary.json"))
    assert summary["iterations"] == 2 and summary["evaluation"]["random"]["games"] == 2
    assert [json.loads(line)["iteration"] for line in get("logs/metrics.jsonl").decode().splitlines()] == [
        1,
        2,
    ]
