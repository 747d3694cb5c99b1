"""The whole ``rlaif`` graph as one Ray job on a two-node cluster started with ``ray start`` (a head
and a worker node, one CPU each, on this machine), with its input PGN, outputs and checkpoints on S3
(moto_server): the job succeeds, every phase's manifest and outputs are in the bucket, and the
job's tasks and actors ran on both nodes (Ray's state API says where each one ran)."""

from __future__ import annotations

import importlib.util
import io
import json
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from cluster.runtime import forget_dead_ray_address

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

RAY = str(servers.BIN / "ray")
PHASES = ("prepare", "sft", "preferences", "reward", "ppo", "grpo", "evaluate")
BUCKET = "rlaif-runs"
JOB_DEADLINE_S = 480  # the job takes about 4 min on 2 loaded cores; each wait has its deadline


@dataclass
class Cluster:
    url: str  # the head's dashboard / job server
    env: dict[str, str]  # what a client needs: the auth token (and S3, for the checks)
    head: Any
    worker: Any

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [RAY, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def state(self, resource: str, *filters: str) -> list[dict[str, Any]]:
        """``ray list <resource> --detail`` as JSON (the state API through the CLI: the Ray client
        reads its auth settings at import, and this pytest process may hold another Ray)."""
        args = ["list", resource, "--address", self.url, "--format", "json", "--detail", "--limit", "10000"]
        for f in filters:
            args += ["--filter", f]
        done = self.cli(*args, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        return parse_list(done.stdout)

    def logs(self) -> str:
        return "\n".join(
            f"--- {name} ---\n{server.log_tail(4000)}"
            for name, server in (("head", self.head), ("worker", self.worker))
        )


def parse_list(out: str) -> list[dict[str, Any]]:
    """``ray list --format json``'s answer; with nothing to list it prints "No resource in the cluster"."""
    return [] if out.strip().startswith("No resource") else list(json.loads(out))


def ray_start(*args: str, temp_dir: Path) -> list[str]:
    """``ray start --block`` with ports of its own: two nodes on one machine, next to other Rays."""
    return [
        RAY, "start", "--block", *args,
        "--num-cpus=1", "--object-store-memory=500000000",
        f"--dashboard-agent-listen-port={servers.free_port()}", f"--metrics-export-port={servers.free_port()}",
        # the default worker port range is the same for every raylet on a machine: let the OS choose
        "--min-worker-port=0", "--max-worker-port=0",
        "--disable-usage-stats", f"--temp-dir={temp_dir}",
    ]  # fmt: skip


@pytest.fixture
def two_nodes(moto_s3, tmp_path: Path) -> Iterator[Cluster]:
    """A head (``node_head``) and a worker node (``node_worker``), one CPU each, token auth on,
    both with the S3 endpoint's environment (as instance credentials would be on a real cluster).
    Both share one session folder, as every machine of a real cluster has its own /tmp/ray."""
    # AF_UNIX paths are capped at 107 bytes: pytest's tmp paths are too long for Ray's sockets.
    ray_tmp = Path(tempfile.mkdtemp(prefix="rt2n", dir="/tmp"))
    env = dict(moto_s3.env)
    env.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32), "PYTHONUNBUFFERED": "1"})
    gcs_port, dashboard_port = servers.free_port(), servers.free_port()
    url = f"http://127.0.0.1:{dashboard_port}"
    started: list[Any] = []
    try:
        head_cmd = ray_start(
            "--head", f"--port={gcs_port}", "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard_port}",
            f"--ray-client-server-port={servers.free_port()}", '--resources={"node_head": 1}',
            temp_dir=ray_tmp,
        )  # fmt: skip
        # `ray start --block` stops the whole node if a helper process times out while the machine
        # is loaded (see conftest's ray_head): one more try is cheaper than a flaky test.
        for attempt in (1, 2):
            log = tmp_path / f"ray-head-{attempt}.log"
            head = servers.Server(url=url, env=env, process=servers.start_group(head_cmd, log, env), log=log)
            started.append(head)
            try:
                servers.wait_http(f"{url}/api/version", head.process, timeout=120, ok_codes=(200, 401))
                break
            except RuntimeError:
                if attempt == 2:
                    raise
        worker_cmd = ray_start(
            f"--address=127.0.0.1:{gcs_port}", '--resources={"node_worker": 1}', temp_dir=ray_tmp
        )
        log = tmp_path / "ray-worker.log"
        worker = servers.Server(url=url, env=env, process=servers.start_group(worker_cmd, log, env), log=log)
        started.append(worker)
        cluster = Cluster(url=url, env=env, head=head, worker=worker)

        deadline = time.monotonic() + 120
        while True:
            assert worker.process.poll() is None, f"the worker node's `ray start` exited\n{cluster.logs()}"
            done = cluster.cli("list", "nodes", "--address", url, "--format", "json", timeout=60)
            alive = (
                [n for n in parse_list(done.stdout) if n["state"] == "ALIVE"] if done.returncode == 0 else []
            )
            if len(alive) == 2:
                break
            assert time.monotonic() < deadline, f"2 nodes not alive in 120 s: {alive}\n{cluster.logs()}"
            time.sleep(1)
        yield cluster
    finally:
        for server in reversed(started):  # the worker node first, then the head
            servers.stop_group(server.process)
        shutil.rmtree(ray_tmp, ignore_errors=True)
        forget_dead_ray_address()  # `ray start`'s address file names our head: gone now


def submit(cluster: Cluster, args: list[str], deadline: float = 90) -> subprocess.CompletedProcess[str]:
    """`ray job submit`, retried while the head's job agent is still starting."""
    stop = time.monotonic() + deadline
    while True:
        result = cluster.cli("job", "submit", "--address", cluster.url, *args, timeout=180)
        if result.returncode == 0 or "No available agent" not in result.stderr or time.monotonic() > stop:
            return result
        time.sleep(2)


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
    result = submit(
        two_nodes,
        ["--submission-id", job_id, "--no-wait", "--working-dir", str(repo), "--",
         "python", "-m", "pipelines.rlaif", "--config", str(config_path), "--storage", f"s3://{BUCKET}/runs"],
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:] + two_nodes.logs()

    def job_logs() -> str:
        done = two_nodes.cli("job", "logs", "--address", two_nodes.url, job_id, timeout=120)
        return done.stdout + done.stderr

    status, job = None, {}
    deadline = time.monotonic() + JOB_DEADLINE_S
    while time.monotonic() < deadline:
        jobs = two_nodes.state("jobs", f"submission_id={job_id}")
        job = jobs[0] if jobs else {}
        if job.get("status") in ("SUCCEEDED", "FAILED", "STOPPED"):
            status = job["status"]
            break
        time.sleep(3)
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
    for phase in ("sft", "reward", "ppo", "grpo"):
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
    assert results["players"] == [f"lm:{model}/ppo/model", f"lm:{model}/grpo/model", "sft", "random"]
    assert results["games"] == 6 * config["rlaif"]["compare_games"]  # a round robin of 4 players

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
