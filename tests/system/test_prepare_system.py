"""prepare end to end against real servers: a Ray job on `ray start`, S3 on moto, an MLflow server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from chessrl.data.games import GAMES_SCHEMA

pytestmark = pytest.mark.system

TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}


def run_cli(
    args: list[str], env: dict[str, str], cwd: Path, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipelines.prepare", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def submit(
    ray_head, args: list[str], env: dict[str, str], deadline: float = 90
) -> subprocess.CompletedProcess[str]:
    """`ray job submit`, retried while the head's job agent is still starting."""
    stop = time.monotonic() + deadline
    while True:
        result = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
        if result.returncode == 0 or "No available agent" not in result.stderr or time.monotonic() > stop:
            return result
        time.sleep(2)


def test_prepare_as_a_ray_job_on_a_started_cluster(ray_head, tmp_path, repo):
    storage = tmp_path / "runs"
    job_id = f"prepare-{uuid.uuid4().hex[:8]}"
    ray_bin = str(Path(sys.executable).parent / "ray")
    result = submit(
        ray_head,
        [
            ray_bin,
            "job",
            "submit",
            "--address",
            ray_head.url,
            "--submission-id",
            job_id,
            "--no-wait",
            "--working-dir",
            str(repo),
            "--",
            "python",
            "-m",
            "pipelines.prepare",
            "--config",
            "tiny",
            "--generate",
            "0",
            "--storage",
            str(storage),
            "--run-name",
            "job",
            "--no-tracking",
            "--inputs",
            "tests/data/pgn/masters",
            "tests/data/pgn/uci-moves.pgn",
        ],
        ray_head.env,
    )
    assert result.returncode == 0, result.stderr[-2000:] + ray_head.log_tail()

    # The Ray client reads its auth settings at import: ask through the CLI, as a user would.
    def job(*args: str) -> str:
        done = subprocess.run(
            [ray_bin, "job", *args, "--address", ray_head.url, job_id],
            env=ray_head.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout + done.stderr  # the CLI logs some of its answer to stderr

    deadline = time.monotonic() + 300
    status = None
    while time.monotonic() < deadline:
        out = job("status").lower()  # "Job '<id>' succeeded" once it is done
        status = next((s for s in TERMINAL if f"' {s.lower()}" in out or f"was {s.lower()}" in out), None)
        if status:
            break
        time.sleep(2)
    logs = job("logs")
    assert status == "SUCCEEDED", logs[-3000:]
    assert "ray: joined cluster" in logs  # the job used the cluster, not an embedded Ray
    assert "prepare summary" in logs

    summary = json.loads((storage / "job" / "prepare" / "summary.json").read_text())
    table = pads.dataset(storage / "job" / "prepare" / "games", format="parquet").to_table()
    assert table.schema.equals(GAMES_SCHEMA, check_metadata=False)
    assert table.num_rows == summary["games_written"] > 3000
    assert summary["inputs"] == [
        "tests/data/pgn/masters/Ding.pgn.zst",
        "tests/data/pgn/masters/Firouzja.pgn.zst",
        "tests/data/pgn/uci-moves.pgn",
    ]


def test_job_submission_without_the_token_is_refused(ray_head):
    env = {k: v for k, v in ray_head.env.items() if k != "RAY_AUTH_TOKEN"}
    env["RAY_AUTH_TOKEN"] = "0" * 64
    ray_bin = str(Path(sys.executable).parent / "ray")
    result = subprocess.run(
        [ray_bin, "job", "submit", "--address", ray_head.url, "--", "python", "-c", "print(1)"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "token" in (result.stdout + result.stderr).lower()


def s3_fs(server) -> pafs.S3FileSystem:
    host = server.url.split("://", 1)[1]
    return pafs.S3FileSystem(
        endpoint_override=host,
        scheme="http",
        access_key=server.env["AWS_ACCESS_KEY_ID"],
        secret_key=server.env["AWS_SECRET_ACCESS_KEY"],
        region="us-east-1",
    )


def test_prepare_reads_and_writes_s3(s3, moto_s3, tmp_path, repo, pgn_dir):
    s3.create_bucket(Bucket="chess-runs")
    s3.upload_file(
        str(pgn_dir / "masters" / "Firouzja.pgn.zst"), "chess-runs", "input/masters/Firouzja.pgn.zst"
    )
    s3.upload_file(str(pgn_dir / "kasparov-deep-blue-1997.pgn"), "chess-runs", "input/kasparov.pgn")

    result = run_cli(
        [
            "--config",
            "tiny",
            "--generate",
            "0",
            "--storage",
            "s3://chess-runs/runs",
            "--run-name",
            "s3",
            "--no-tracking",
            "--inputs",
            "s3://chess-runs/input/",
        ],
        moto_s3.env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "prepare summary" in result.stdout
    assert "testing-secret" not in result.stdout + result.stderr

    fs = s3_fs(moto_s3)
    summary = json.loads(fs.open_input_stream("chess-runs/runs/s3/prepare/summary.json").read())
    table = pq.read_table("chess-runs/runs/s3/prepare/games", filesystem=fs)
    assert table.num_rows == summary["games_written"] > 1800
    assert summary["inputs"] == [
        "s3://chess-runs/input/kasparov.pgn",
        "s3://chess-runs/input/masters/Firouzja.pgn.zst",
    ]
    assert set(table.column("source").to_pylist()) == set(summary["inputs"])
    # Nothing half-written is left behind in the bucket.
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="chess-runs", Prefix="runs/")["Contents"]]
    files = [k for k in keys if not k.endswith("/")]  # folder markers pyarrow creates
    assert sorted(files) == sorted(
        [f"runs/s3/prepare/games/{shard}" for shard in summary["shards"]] + ["runs/s3/prepare/summary.json"]
    ), keys


def test_missing_bucket_is_one_clear_error(moto_s3, tmp_path):
    result = run_cli(
        [
            "--config",
            "tiny",
            "--generate",
            "0",
            "--storage",
            str(tmp_path),
            "--no-tracking",
            "--inputs",
            "s3://no-such-bucket/x.pgn",
        ],
        moto_s3.env,
        cwd=tmp_path,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "s3://no-such-bucket/x.pgn" in result.stderr


def test_prepare_logs_to_an_mlflow_server(mlflow_server, tmp_path, pgn_dir):
    from mlflow.tracking import MlflowClient

    env = dict(mlflow_server.env, MLFLOW_TRACKING_URI=mlflow_server.url)
    result = run_cli(
        [
            "--config",
            "tiny",
            "--generate",
            "0",
            "--storage",
            str(tmp_path / "runs"),
            "--run-name",
            "served",
            "--inputs",
            str(pgn_dir / "kasparov-deep-blue-1997.pgn"),
            str(pgn_dir / "molinari-bordais-1979.pgn"),
        ],
        env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:] + mlflow_server.log_tail()
    assert f"at {mlflow_server.url}" in result.stdout

    client = MlflowClient(tracking_uri=mlflow_server.url)
    experiment = client.get_experiment_by_name("chess-rl")
    runs = client.search_runs([experiment.experiment_id])
    child = next(r for r in runs if r.data.tags.get("chess_rl.phase") == "prepare")
    parent = client.get_run(child.data.tags["mlflow.parentRunId"])
    assert parent.info.run_name == "served"
    assert parent.data.params["run.name"] == "served"
    assert child.data.metrics["games_written"] == 7
    assert child.data.metrics["mean_plies"] > 10
    assert child.data.params["prepare.min_elo"] == "0"
    artifacts = [a.path for a in client.list_artifacts(child.info.run_id)]
    assert "summary.json" in artifacts
    local = client.download_artifacts(child.info.run_id, "summary.json", str(tmp_path))
    assert json.loads(Path(local).read_text())["games_written"] == 7


def test_a_model_saved_to_s3_loads_back_through_base_model_paths(s3, moto_s3, tmp_path, monkeypatch):
    """--base-model s3://...: a checkpoint uploaded to the S3 endpoint loads like a local one."""
    import torch

    from chessrl.lm.checkpoints import checkpoint_config, load_pretrained, load_tokenizer
    from chessrl.lm.models import build_model, count_parameters
    from cluster.storage import Storage

    for key in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"):
        monkeypatch.setenv(key, moto_s3.env[key])
    s3.create_bucket(Bucket="chess-models")
    model, tok = build_model("tiny")
    model.save_pretrained(tmp_path / "local")
    tok.save_pretrained(tmp_path / "local")
    remote = Storage.from_uri("s3://chess-models/tiny")
    for path in (tmp_path / "local").iterdir():
        remote.upload_file(path, path.name)
    loaded, loaded_tok = load_pretrained("s3://chess-models/tiny", cache_dir=str(tmp_path / "cache"))
    assert count_parameters(loaded) == count_parameters(model) and len(loaded_tok) == len(tok)
    assert (tmp_path / "cache" / "model.safetensors").is_file()  # a cache asked for is kept
    # without one, the copy is gone once loaded (a config or a tokenizer alone copies no weights)
    assert count_parameters(load_pretrained("s3://chess-models/tiny")[0]) == count_parameters(model)
    assert checkpoint_config("s3://chess-models/tiny")["n_positions"] == model.config.n_positions
    assert len(load_tokenizer("s3://chess-models/tiny")) == len(tok)
    assert not [n for n in os.listdir(tempfile.gettempdir()) if n.startswith("chess-rl-model-")]
    ids = torch.tensor([loaded_tok("e2e4 e7e5")["input_ids"]])
    model.eval()
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, loaded(ids).logits, atol=1e-6)

    # the one loader reads S3 by file info and ranged reads: a truncated upload is one line naming it
    from chessrl.arena.saved_models import check_saved_model, load_saved_model
    from chessrl.lm.checkpoints import ModelLoadError

    check_saved_model("s3://chess-models/tiny", "policy")
    damaged = Storage.from_uri("s3://chess-models/damaged")
    for path in (tmp_path / "local").iterdir():
        data = path.read_bytes()
        damaged.write_bytes(path.name, data[: len(data) // 2] if path.name == "model.safetensors" else data)
    with pytest.raises(ModelLoadError) as error:
        load_saved_model("s3://chess-models/damaged", "policy")
    size = (tmp_path / "local" / "model.safetensors").stat().st_size
    assert str(error.value) == (
        f"s3://chess-models/damaged/model.safetensors is not a readable safetensors file "
        f"(truncated: {size // 2:,} of {size:,} bytes); copy the model again or re-export it"
    )
