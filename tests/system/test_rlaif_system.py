"""The whole ``rlaif`` graph as one Ray job on a two-node cluster started with ``ray start`` (a head
and a worker node, one CPU each, on this machine), with its input PGN, outputs and checkpoints on S3
(moto_server): the job succeeds, every phase's manifest and outputs are in the bucket, and the
job's tasks and actors ran on both nodes (Ray's state API says where each one ran). The job is
polled through the head's HTTP API, not a CLI process every few seconds."""

from __future__ import annotations

import importlib.util
import io
import json
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

pytestmark = pytest.mark.system

HERE = Path(__file__).resolve().parent


def _load(path: Path, name: str) -> ModuleType:
    """A module of tests/ by its path: neither tests/ nor its folders are packages, and pytest
    takes ``conftest`` out of ``sys.modules`` again after loading it."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # (dataclasses look their module up there)
    spec.loader.exec_module(module)
    return module


# The servers' helpers of this folder's conftest, and the smallest config on which the whole
# graph runs (the integration test's), so that the two stay one.
servers = _load(HERE / "conftest.py", "_system_servers")
MICRO: dict[str, Any] = _load(HERE.parent / "integration" / "test_rlaif.py", "_integration_rlaif").MICRO
Cluster, RAY = servers.Cluster, servers.RAY

PHASES = ("prepare", "sft", "preferences", "reward", "ppo", "grpo", "dpo", "evaluate")
BUCKET = "rlaif-runs"
JOB_DEADLINE_S = 480  # the job takes about 4 min on 2 loaded cores; each wait has its deadline


def test_rlaif_as_one_job_on_two_nodes_with_s3(
    two_nodes: Cluster, s3, tmp_path: Path, repo: Path, pgn_dir: Path
):
    s3.create_bucket(Bucket=BUCKET)
    s3.upload_file(str(pgn_dir / "masters" / "Firouzja.pgn.zst"), BUCKET, "input/Firouzja.pgn.zst")
    # The cluster config's rule: inputs and storage reachable from every node, so both on S3.
    config = {**MICRO, "prepare": {**MICRO["prepare"], "inputs": [f"s3://{BUCKET}/input/Firouzja.pgn.zst"]}}
    config_path = tmp_path / "micro.yaml"  # read by the driver, which runs on the head (this machine)
    config_path.write_text(yaml.safe_dump(config))
    run_name = config["run"]["name"]
    prefix = f"runs/{run_name}"

    job_id = f"rlaif-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    result = two_nodes.submit(
        ["--submission-id", job_id, "--no-wait", "--working-dir", str(repo), "--",
         "python", "-m", "pipelines.rlaif", "--config", str(config_path), "--storage", f"s3://{BUCKET}/runs"],
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:] + two_nodes.logs()

    def job_logs() -> str:
        done = two_nodes.cli("job", "logs", "--address", two_nodes.url, job_id, timeout=120)
        return done.stdout + done.stderr

    job = two_nodes.wait_job(job_id, deadline_s=JOB_DEADLINE_S)
    status = job.get("status") if job.get("status") in ("SUCCEEDED", "FAILED", "STOPPED") else None
    seconds = time.monotonic() - started
    logs = job_logs()
    (tmp_path / "job.log").write_text(logs)
    if status is None:
        two_nodes.cli("job", "stop", "--address", two_nodes.url, "--no-wait", job_id)
    print(f"\nrlaif job {job_id}: {status} after {seconds:.0f} s (its log: {tmp_path / 'job.log'})")
    print("\n".join(line for line in logs.splitlines() if line.startswith("[rlaif]")))
    assert status == "SUCCEEDED", (
        f"job {job_id}: {status or f'not finished in {JOB_DEADLINE_S} s'} ({job.get('message')})\n"
        f"{logs[-6000:]}\n{two_nodes.logs()}"
    )
    # the driver joined the two-node cluster (not an embedded Ray of its own)
    assert "[rlaif] ray: joined cluster" in logs and ", 2 CPUs" in logs, logs[-3000:]
    assert "rlaif: graph state in s3://" in logs and "evaluate summary" in logs, logs[-3000:]
    assert "testing-secret" not in logs

    # Every phase's manifest and outputs are in the bucket.
    keys: set[str] = set()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{prefix}/"):
        keys |= {o["Key"][len(prefix) + 1 :] for o in page.get("Contents", [])}

    def read(key: str) -> bytes:
        return s3.get_object(Bucket=BUCKET, Key=f"{prefix}/{key}")["Body"].read()

    listing = "\n".join(sorted(k for k in keys if "/ray/" not in k))
    graph = json.loads(read("rlaif/graph.json"))
    assert {n["node"]: n["state"] for n in graph["nodes"]} == dict.fromkeys(PHASES, "done"), graph
    for phase in PHASES:
        assert f"rlaif/manifests/{phase}.json" in keys, listing
        manifest = json.loads(read(f"rlaif/manifests/{phase}.json"))
        assert manifest["key"] == graph["keys"][phase], (phase, manifest)
    assert not [k for k in keys if k.endswith(".started.json")], listing  # every phase finished
    for phase in ("sft", "reward", "ppo", "grpo", "dpo"):
        assert f"{phase}/model/config.json" in keys, (phase, listing)
    assert json.loads(read("grpo/model/config.json"))["chessrl_text_format"] == "moves"

    games = sorted(k for k in keys if k.startswith("prepare/games/") and k.endswith(".parquet"))
    summary = json.loads(read("prepare/summary.json"))
    assert summary["inputs"] == [f"s3://{BUCKET}/input/Firouzja.pgn.zst"]
    assert (
        games
        and sum(pq.read_table(io.BytesIO(read(k))).num_rows for k in games) == summary["games_written"] > 0
    )
    for split in ("train", "heldout"):
        shards = [k for k in keys if k.startswith(f"preferences/{split}/") and k.endswith(".parquet")]
        assert shards and sum(pq.read_table(io.BytesIO(read(k))).num_rows for k in shards) > 0, (
            split,
            listing,
        )

    results = json.loads(read("evaluate/eval/results.json"))
    model = f"s3://{BUCKET}/{prefix}"
    assert results["players"] == [f"lm:{model}/ppo/model,masked", f"lm:{model}/grpo/model,masked",
                                  f"lm:{model}/dpo/model,masked", f"lm:{model}/sft/model,masked", "random"]  # fmt: skip
    assert results["games"] == 7 * config["rlaif"]["compare_games"]  # each RL policy: its start and random

    # The work ran on both nodes: where the state API says each task and actor of the job ran
    # (the job's own Ray job id, so not the job supervisor's actor).
    nodes = {n["node_id"]: n for n in two_nodes.state("nodes")}
    head = next(i for i, n in nodes.items() if n["resources_total"].get("node_head"))
    worker = next(i for i, n in nodes.items() if n["resources_total"].get("node_worker"))
    ray_job = job["job_id"]
    tasks = two_nodes.state("tasks", f"job_id={ray_job}")
    actors = two_nodes.state("actors", f"job_id={ray_job}")
    where: dict[str, Counter[str]] = {}  # node id -> what ran there
    for task in tasks:
        if task.get("node_id"):
            where.setdefault(task["node_id"], Counter())[f"task {task['name']}"] += 1
    for actor in actors:
        if actor.get("node_id"):
            where.setdefault(actor["node_id"], Counter())[f"actor {actor['class_name']}"] += 1
    for node, ran in where.items():
        label = {head: "head", worker: "worker"}.get(node, "unknown")
        print(
            f"{label} node {node[:8]}: {sum(ran.values())} tasks and actors, most: {dict(ran.most_common(10))}"
        )
    assert set(where) == {head, worker}, where


def test_annotate_spreads_its_engines_over_both_nodes(two_nodes: Cluster, s3, repo: Path):
    """Two Stockfish processes on a cluster of two one-CPU nodes: one engine actor on each node,
    each asking for one CPU (one actor asking for the cluster's two CPUs, as every phase's pool
    did, waits forever: no node holds it)."""
    s3.create_bucket(Bucket="annotate-runs")
    job_id = f"annotate-{uuid.uuid4().hex[:8]}"
    result = two_nodes.submit(
        ["--submission-id", job_id, "--no-wait", "--working-dir", str(repo), "--",
         "python", "-m", "pipelines.annotate", "--config", "tiny", "--run-name", "ann", "--no-tracking",
         "--storage", "s3://annotate-runs/runs", "--sources", "random", "--positions", "24",
         "--heldout-positions", "0", "--nodes", "20", "--engines", "2"],
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:] + two_nodes.logs()
    job = two_nodes.wait_job(job_id, deadline_s=180)
    logs = two_nodes.cli("job", "logs", "--address", two_nodes.url, job_id, timeout=120).stdout
    if job.get("status") not in ("SUCCEEDED", "FAILED", "STOPPED"):
        two_nodes.cli("job", "stop", "--address", two_nodes.url, "--no-wait", job_id)
    assert job.get("status") == "SUCCEEDED", f"{job}\n{logs[-4000:]}"
    assert "annotate summary" in logs and "random 24" in logs, logs[-3000:]
    nodes = {n["node_id"]: n for n in two_nodes.state("nodes")}
    engines = [
        a
        for a in two_nodes.state("actors", f"job_id={job['job_id']}")
        if a["class_name"] == "EnginePoolActor"
    ]
    assert {a["node_id"] for a in engines} == set(nodes), engines
    assert all(a["required_resources"].get("CPU") == 1 for a in engines), engines
