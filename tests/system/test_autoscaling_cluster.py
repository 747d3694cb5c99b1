"""Phases ask an autoscaling cluster for nodes instead of refusing, on Ray's own autoscaling test
provider (``fake_multinode``: ``RAY_FAKE_CLUSTER=1 ray start --head --autoscaling-config=...``,
whose autoscaler starts each "node" as raylet processes on this machine). Like a ``ray up``
cluster: a head with 0 CPUs, two worker node types of different sizes (``small``: 1 CPU;
``big``: 2 CPUs and a custom resource standing in for an accelerator), ``min_workers: 0``, so the
cluster starts with no CPU at all.

- Engines more than every node type together can hold: one line, exit 2, in seconds, no node
  started for it.
- ``prepare --generate 4`` submitted with ``ray job submit``: it sizes its engines from the node
  types (2, one ``big`` node's CPUs), asks the autoscaler, says so while the node starts, places
  its engine actor on the launched node (the state API says where), finishes; the idle node then
  goes away (nothing of the ask outlives the phase). Before cluster/capacity.py the same command
  stopped at once: "prepare.engines 1 needs 1 CPUs ...; the cluster's nodes hold 0 engines".
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster.runtime import forget_dead_ray_address

pytestmark = pytest.mark.system

RAY = str(Path(sys.executable).parent / "ray")


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def autoscaling_config(gcs_port: int) -> dict[str, Any]:
    """The fake provider's cluster: the head (0 CPUs, as on a real cluster) and two worker types
    that start from zero. ``gcs_address`` keeps its nodes off the fixed port 6379 (other Rays on
    this machine); the nodes go idle after 6 s (``idle_timeout_minutes: 0.1``)."""
    return {
        "cluster_name": "fake-autoscaling",
        "max_workers": 3,
        "upscaling_speed": 1.0,
        "idle_timeout_minutes": 0.1,
        "provider": {
            "type": "fake_multinode",
            "gcs_address": f"127.0.0.1:{gcs_port}",
            "use_node_id_as_ip": True,
            "disable_node_updaters": True,
            "disable_launch_config_check": True,
        },
        "auth": {"ssh_user": "ubuntu"},
        "head_node_type": "ray.head.default",
        "available_node_types": {
            "ray.head.default": {"resources": {"CPU": 0}, "node_config": {}, "max_workers": 0},
            "small": {
                "resources": {"CPU": 1, "object_store_memory": 200_000_000},
                "node_config": {},
                "min_workers": 0,
                "max_workers": 2,
            },
            "big": {
                "resources": {"CPU": 2, "accel": 1, "object_store_memory": 200_000_000},
                "node_config": {},
                "min_workers": 0,
                "max_workers": 1,
            },
        },
        **{
            key: []
            for key in (
                "initialization_commands",
                "setup_commands",
                "head_setup_commands",
                "worker_setup_commands",
                "head_start_ray_commands",
                "worker_start_ray_commands",
                "cluster_synced_files",
            )
        },
        "file_mounts": {},
        "file_mounts_sync_continuously": False,
        "docker": {},
    }


@dataclass
class FakeCluster:
    url: str  # the head's dashboard / job server
    env: dict[str, str]  # what a client needs: the token
    process: subprocess.Popen[bytes]
    log: Path

    def api(self, path: str) -> Any:
        request = urllib.request.Request(
            f"{self.url}{path}", headers={"Authorization": f"Bearer {self.env['RAY_AUTH_TOKEN']}"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def rows(self, resource: str) -> list[dict[str, Any]]:
        """The state API's ``resource`` (nodes, actors), every one with its details."""
        answer = self.api(f"/api/v0/{resource}?limit=10000&detail=1")
        return list(answer.get("data", {}).get("result", {}).get("result", []))

    def alive(self) -> list[dict[str, Any]]:
        return [n for n in self.rows("nodes") if n.get("state") == "ALIVE"]

    def run_job(self, repo: Path, args: list[str], deadline_s: float) -> tuple[dict[str, Any], str]:
        """``ray job submit`` of a phase, then its record once ended and its logs."""
        job_id = f"autoscale-{uuid.uuid4().hex[:8]}"
        cmd = [
            RAY,
            "job",
            "submit",
            "--address",
            self.url,
            "--submission-id",
            job_id,
            "--no-wait",
            "--working-dir",
            str(repo),
            "--",
            "python",
            "-m",
            *args,
        ]
        stop = time.monotonic() + 90
        while True:  # retried while the head's job agent is still starting
            done = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=180)
            if done.returncode == 0 or "No available agent" not in done.stderr or time.monotonic() > stop:
                break
            time.sleep(2)
        assert done.returncode == 0, done.stderr[-2000:] + self.log.read_text(errors="replace")[-3000:]
        job: dict[str, Any] = {}
        end = time.monotonic() + deadline_s
        while time.monotonic() < end and job.get("status") not in ("SUCCEEDED", "FAILED", "STOPPED"):
            time.sleep(1)
            job = self.api(f"/api/jobs/{job_id}")
        logs = subprocess.run(
            [RAY, "job", "logs", "--address", self.url, job_id],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        return job, logs.stdout + logs.stderr


@pytest.fixture(scope="module")
def fake_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeCluster]:
    """The head of a fake_multinode cluster (``ray start --head --block``, its own ports, token
    and session folder); the nodes its autoscaler starts are processes of the head's group,
    stopped with it."""
    tmp = tmp_path_factory.mktemp("fake-autoscaling")
    ray_tmp = Path(tempfile.mkdtemp(prefix="rtfa", dir="/tmp"))  # AF_UNIX paths are capped at 107 bytes
    gcs_port, dashboard_port = _port(), _port()
    config = tmp / "autoscaling.yaml"
    config.write_text(yaml.safe_dump(autoscaling_config(gcs_port), sort_keys=False))
    env = {
        k: v
        for k, v in os.environ.items()
        if k.startswith("RAY_TRAIN_") or not k.startswith(("RAY_", "MLFLOW_"))
    }
    env.update(
        {
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": secrets.token_hex(32),
            "PYTHONUNBUFFERED": "1",
            "RAY_FAKE_CLUSTER": "1",
            "AUTOSCALER_UPDATE_INTERVAL_S": "1",
        }
    )
    cmd = [
        RAY,
        "start",
        "--head",
        "--block",
        "--num-cpus=0",
        f"--port={gcs_port}",
        f"--autoscaling-config={config}",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dashboard_port}",
        f"--dashboard-agent-listen-port={_port()}",
        f"--metrics-export-port={_port()}",
        f"--ray-client-server-port={_port()}",
        "--min-worker-port=0",
        "--max-worker-port=0",
        "--object-store-memory=200000000",
        "--disable-usage-stats",
        f"--temp-dir={ray_tmp}",
    ]
    log = tmp / "head.log"
    with log.open("wb") as handle:
        process = subprocess.Popen(
            cmd, stdout=handle, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    cluster = FakeCluster(url=f"http://127.0.0.1:{dashboard_port}", env=env, process=process, log=log)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
            try:
                if cluster.alive():
                    break
            except (OSError, urllib.error.HTTPError):
                pass
            time.sleep(1)
        yield cluster
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):  # the head, its autoscaler and every node it started
            try:
                os.killpg(process.pid, sig)
                process.wait(timeout=3)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        shutil.rmtree(ray_tmp, ignore_errors=True)
        forget_dead_ray_address()


PREPARE = [
    "pipelines.prepare",
    "--config",
    "tiny",
    "--no-tracking",
    "--generate",
    "4",
    "--inputs",
    "--generate-nodes",
    "100",
    "--generate-max-plies",
    "40",
]


def test_engines_no_set_of_nodes_can_hold_are_one_line_in_seconds(fake_cluster, repo, tmp_path, driver_err):
    started = time.monotonic()
    job, logs = fake_cluster.run_job(
        repo,
        [*PREPARE, "--engines", "9", "--storage", str(tmp_path), "--run-name", "too-many"],
        deadline_s=120,
    )
    took = time.monotonic() - started
    assert job.get("status") == "FAILED" and "exit code 2" in job.get("message", ""), f"{job}\n{logs[-3000:]}"
    errors = [line for line in driver_err(logs).splitlines() if line.startswith("error:")]
    assert len(errors) == 1, logs[-3000:]
    assert "prepare.engines 9 needs 9 CPUs" in errors[0] and "ask for at most 4" in errors[0], errors
    assert "small ×2 (CPU 1), big ×1 (CPU 2, accel 1)" in errors[0], errors  # what its autoscaler starts
    assert "Traceback" not in driver_err(logs)
    assert took < 90, f"{took:.0f} s"  # the submission and the driver's start, no wait for a node
    assert len(fake_cluster.alive()) == 1  # nothing was started for it


def test_prepare_scales_a_node_up_from_nothing_and_places_its_engines_there(fake_cluster, repo, tmp_path):
    nodes = fake_cluster.alive()
    assert len(nodes) == 1 and not nodes[0]["resources_total"].get("CPU"), nodes  # the head alone, 0 CPUs
    head = nodes[0]["node_id"]

    job, logs = fake_cluster.run_job(
        repo, [*PREPARE, "--storage", str(tmp_path), "--run-name", "scaled"], deadline_s=240
    )
    assert job.get("status") == "SUCCEEDED", f"{job}\n{logs[-4000:]}\n{fake_cluster.log.read_text()[-2000:]}"
    # it asked (one line), said what was starting while it waited or at once got room, and went on
    assert "[prepare] prepare.engines 2: asking the autoscaler for 1 × CPU 2;" in logs, logs[-4000:]
    assert "[prepare] prepare.engines 2: room after" in logs, logs[-4000:]
    assert "generating 4 games with 2 Stockfish process(es)" in logs
    summary = json.loads((tmp_path / "scaled" / "prepare" / "summary.json").read_text())
    assert summary["games_written"] == 4

    launched = {n["node_id"]: n for n in fake_cluster.rows("nodes") if n["node_id"] != head}
    engines = [a for a in fake_cluster.rows("actors") if a["class_name"] == "EnginePoolActor"]
    assert len(engines) == 1 and engines[0]["node_id"] in launched, (engines, launched)
    node = launched[engines[0]["node_id"]]
    assert node["resources_total"].get("CPU") == 2 and node["resources_total"].get("accel") == 1, (
        node
    )  # a big one

    # once the phase is done its node is idle, and goes: nothing of the ask holds it
    deadline = time.monotonic() + 90
    while len(fake_cluster.alive()) > 1:
        assert time.monotonic() < deadline, fake_cluster.alive()
        time.sleep(2)
