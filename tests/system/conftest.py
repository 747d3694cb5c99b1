"""Real servers on loopback, each in its own process group and stopped with it: a Ray head
(``ray start --head --block``), a two-node Ray cluster (a head and a worker node), an autoscaling
cluster on Ray's fake provider (a head with 0 CPUs whose autoscaler starts nodes from nothing), an
S3 endpoint (``moto_server``, one for the session), an MLflow server."""

from __future__ import annotations

import contextlib
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

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    url: str
    env: dict[str, str]
    process: subprocess.Popen[bytes]
    log: Path

    def log_tail(self, n: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""


def start_group(
    cmd: list[str], log: Path, env: dict[str, str], cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    handle = log.open("wb")
    return subprocess.Popen(
        cmd, stdout=handle, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True
    )


def stop_group(process: subprocess.Popen[bytes], grace: float = 20.0) -> None:
    """SIGTERM the whole process group, then SIGKILL what is left."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            if sig == signal.SIGTERM:
                # the leader exited; its children may linger a moment
                time.sleep(0.5)
                os.killpg(process.pid, signal.SIGKILL)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def wait_http(
    url: str, process: subprocess.Popen[bytes], timeout: float, ok_codes: tuple[int, ...] = (200,)
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status in ok_codes:
                    return
        except urllib.error.HTTPError as exc:
            if exc.code in ok_codes:
                return
        except OSError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"{url} did not answer within {timeout:.0f}s")


RUNTIME_STARTED = b"Ray runtime started."


def start_ray_head(cmd: list[str], env: dict[str, str], url: str, tmp: Path, name: str) -> Server:
    """``ray start --head --block``, returned once its dashboard answers and it has printed "Ray
    runtime started." (its raylet has registered with the GCS: the dashboard answers before that).

    `ray start --block` stops the whole head if a helper process (e.g. the Ray Client server) or
    the raylet's registration times out while the machine is loaded (Ray gives the raylet a fixed
    30 s; CI saw it miss once, after the dashboard had already answered): one more try is cheaper
    than a flaky suite. The logs are ``tmp/<name>-<attempt>.log``."""
    for attempt in (1, 2):
        log = tmp / f"{name}-{attempt}.log"
        server = Server(url=url, env=env, process=start_group(cmd, log, env), log=log)
        try:
            wait_http(f"{url}/api/version", server.process, timeout=120, ok_codes=(200, 401))
            deadline = time.monotonic() + 120
            while RUNTIME_STARTED not in log.read_bytes():
                if server.process.poll() is not None:
                    raise RuntimeError(f"`ray start` exited with {server.process.returncode}")
                if time.monotonic() > deadline:
                    raise TimeoutError("`ray start` did not say the runtime started in 120 s")
                time.sleep(0.3)
            return server
        except (RuntimeError, TimeoutError) as exc:
            stop_group(server.process, grace=3)
            if attempt == 2:
                raise RuntimeError(f"{exc}\n{server.log_tail()}") from exc
    raise AssertionError("unreachable")


def base_env() -> dict[str, str]:
    # (the tests' Ray Train settings, RAY_TRAIN_*, stay: a job's driver inherits the head's environment)
    env = {
        k: v
        for k, v in os.environ.items()
        if k.startswith("RAY_TRAIN_") or not k.startswith(("RAY_", "MLFLOW_", "AWS_"))
    }
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    return env


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``ray start --head`` on loopback with token auth on (its own token, not ~/.ray's)."""
    tmp = tmp_path_factory.mktemp("ray-head")
    # Ray's unix sockets live under --temp-dir and AF_UNIX paths are capped at 107 bytes:
    # pytest's tmp paths are too long, so the session files go to a short folder of our own.
    ray_tmp = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))
    dashboard_port = free_port()
    env = base_env()
    env.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)})
    cmd = [
        str(BIN / "ray"),
        "start",
        "--head",
        "--block",
        f"--port={free_port()}",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dashboard_port}",
        # The job agent's HTTP port is fixed (52365) by default: the integration tests' embedded Ray,
        # still alive in this pytest process, already holds it, and the job server would then
        # answer "No available agent" forever. Give this head ports of its own.
        f"--dashboard-agent-listen-port={free_port()}",
        f"--metrics-export-port={free_port()}",
        "--num-cpus=2",
        "--object-store-memory=1000000000",
        "--disable-usage-stats",
        f"--temp-dir={ray_tmp}",
    ]
    server: Server | None = None
    try:
        server = start_ray_head(cmd, env, f"http://127.0.0.1:{dashboard_port}", tmp, "ray-start")
        yield server
    finally:
        # its files go with ray_tmp: no clean stop needed (a SIGTERMed `ray start --block` took the
        # whole 20 s grace, the module's last test's teardown, before its SIGKILL)
        if server is not None:
            stop_group(server.process, grace=3)
        shutil.rmtree(ray_tmp, ignore_errors=True)
        # A killed `ray start` leaves its address in /tmp/ray/ray_current_cluster (only `ray stop`
        # removes it); left there, it stalls every later TorchTrainer run on this machine.
        forget_dead_ray_address()


@pytest.fixture(scope="session")
def moto_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A real S3 HTTP endpoint on loopback; ``env`` points boto3/pyarrow at it. One for the session:
    each test makes buckets of its own."""
    tmp = tmp_path_factory.mktemp("moto")
    port = free_port()
    env = base_env()
    process = start_group(
        [str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)], tmp / "moto.log", env
    )
    url = f"http://127.0.0.1:{port}"
    env = dict(env)
    env.update(
        {
            "AWS_ENDPOINT_URL": url,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing-secret",
            "AWS_REGION": "us-east-1",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
    )
    server = Server(url=url, env=env, process=process, log=tmp / "moto.log")
    try:
        wait_http(f"{url}/moto-api/", process, timeout=60)
        yield server
    finally:
        stop_group(process, grace=5)


@pytest.fixture(scope="session")
def s3(moto_s3: Server) -> Any:
    """A boto3 S3 client of ``moto_s3`` (for buckets and checks; the phases use their own). One
    for the session, so module fixtures that fill a bucket use it too."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=moto_s3.url,
        aws_access_key_id=moto_s3.env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=moto_s3.env["AWS_SECRET_ACCESS_KEY"],
        region_name="us-east-1",
    )


def registered_checkpoints(s3: Any, bucket: str, folder: str) -> list[dict[str, Any]]:
    """The checkpoints Ray Train has recorded under ``s3://<bucket>/<folder>/ray/`` (its
    snapshot files): the ones a resumed run may start from, each with its ``metrics``. A snapshot
    being written is left for the next look.

    ``[int(r["metrics"]["iteration"]) for r in registered_checkpoints(s3, "b", "runs/x/grpo")]``"""
    results: list[dict[str, Any]] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{folder}/ray/"):
        for item in page.get("Contents", []):
            if not item["Key"].endswith("checkpoint_manager_snapshot.json"):
                continue
            try:
                body = s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
                results += json.loads(body)["checkpoint_results"]
            except (ValueError, KeyError, s3.exceptions.NoSuchKey):  # being written
                continue
    return results


@pytest.fixture(scope="session")
def registered_on_s3() -> Any:
    """:func:`registered_checkpoints`, for the test modules (conftest is not importable)."""
    return registered_checkpoints


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``mlflow server`` with a sqlite backend, one worker, on loopback."""
    tmp = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    env = base_env()
    cmd = [
        str(BIN / "mlflow"),
        "server",
        "--backend-store-uri",
        f"sqlite:///{tmp / 'mlflow.db'}",
        "--artifacts-destination",
        str(tmp / "artifacts"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
    ]
    process = start_group(cmd, tmp / "mlflow.log", env, cwd=tmp)
    url = f"http://127.0.0.1:{port}"
    server = Server(url=url, env=env, process=process, log=tmp / "mlflow.log")
    try:
        wait_http(f"{url}/health", process, timeout=120)
        yield server
    finally:
        stop_group(process, grace=10)


RAY = str(BIN / "ray")


@dataclass
class Cluster:
    """A ``ray start`` cluster of two nodes on this machine, and how a client talks to it."""

    url: str  # the head's dashboard / job server
    env: dict[str, str]  # what a client needs: the auth token (and S3, for the checks)
    head: Server
    worker: Server
    tmp: Path  # the nodes' logs
    worker_cmd: Any  # n -> the n-th worker node's `ray start` command
    started: list[Server]  # every node started, to stop at the end
    head_only: Path  # a folder the worker node sees empty (started_two_nodes' head_only)
    workers_started: int = 0

    def start_worker(self, timeout: float = 120) -> None:
        """A worker node joins (again): its `ray start`, then both nodes ALIVE."""
        log = self.tmp / f"ray-worker-{self.workers_started}.log"
        self.worker = Server(
            self.url, self.env, start_group(self.worker_cmd(self.workers_started), log, self.env), log
        )
        self.workers_started += 1
        self.started.append(self.worker)
        deadline = time.monotonic() + timeout
        while self.alive_nodes() < 2:
            assert self.worker.process.poll() is None, f"the worker node's `ray start` exited\n{self.logs()}"
            assert time.monotonic() < deadline, f"2 nodes not alive in {timeout:.0f} s\n{self.logs()}"
            time.sleep(1)

    def kill_worker(self) -> None:
        """The worker node dies at once: SIGKILL to its `ray start`, raylet and every worker process."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.worker.process.pid, signal.SIGKILL)
        self.worker.process.wait(timeout=30)

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [RAY, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def api(self, path: str, timeout: float = 30) -> Any:
        """GET ``path`` of the head's HTTP API with the cluster's token, as JSON. Polling uses this,
        not the CLI: each ``ray list`` or ``ray job status`` starts a Python that imports Ray, ~2 s
        of CPU that a job on this 2-CPU machine is waiting for."""
        request = urllib.request.Request(
            f"{self.url}{path}", headers={"Authorization": f"Bearer {self.env['RAY_AUTH_TOKEN']}"}
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())

    def job_status(self, submission_id: str) -> dict[str, Any]:
        """The Jobs REST API's record of a job (``status``, ``message``, ``job_id``); {} if unknown."""
        try:
            return dict(self.api(f"/api/jobs/{submission_id}"))
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return {}
            raise

    def alive_nodes(self) -> int:
        """How many nodes the state API lists as ALIVE (0 while it cannot answer yet)."""
        try:
            answer = self.api("/api/v0/nodes?limit=100", timeout=10)
        except OSError:
            return 0
        rows = answer.get("data", {}).get("result", {}).get("result", [])
        return sum(1 for n in rows if n.get("state") == "ALIVE")

    def state(self, resource: str, *filters: str) -> list[dict[str, Any]]:
        """``ray list <resource> --detail`` as JSON (the state API through the CLI, as a user asks:
        the Ray client reads its auth settings at import, and this pytest process may hold another Ray)."""
        args = ["list", resource, "--address", self.url, "--format", "json", "--detail", "--limit", "10000"]
        for f in filters:
            args += ["--filter", f]
        done = self.cli(*args, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        return parse_list(done.stdout)

    def submit(self, args: list[str], deadline: float = 90) -> subprocess.CompletedProcess[str]:
        """``ray job submit``, retried while the head's job agent is still starting."""
        stop = time.monotonic() + deadline
        while True:
            result = self.cli("job", "submit", "--address", self.url, *args, timeout=180)
            if result.returncode == 0 or "No available agent" not in result.stderr or time.monotonic() > stop:
                return result
            time.sleep(2)

    def wait_job(self, submission_id: str, deadline_s: float) -> dict[str, Any]:
        """The job's record once it has ended, or its last record when ``deadline_s`` ran out."""
        job: dict[str, Any] = {}
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            job = self.job_status(submission_id)
            if job.get("status") in ("SUCCEEDED", "FAILED", "STOPPED"):
                break
            time.sleep(2)
        return job

    def logs(self) -> str:
        return "\n".join(
            f"--- {name} ---\n{server.log_tail(4000)}"
            for name, server in (("head", self.head), ("worker", self.worker))
        )


def parse_list(out: str) -> list[dict[str, Any]]:
    """``ray list --format json``'s answer; with nothing to list it prints "No resource in the cluster"."""
    return [] if out.strip().startswith("No resource") else list(json.loads(out))


def ray_start(*args: str, temp_dir: Path, cpus: int = 1) -> list[str]:
    """``ray start --block`` with ports of its own: two nodes on one machine, next to other Rays."""
    return [
        RAY,
        "start",
        "--block",
        *args,
        f"--num-cpus={cpus}",
        "--object-store-memory=500000000",
        f"--dashboard-agent-listen-port={free_port()}",
        f"--metrics-export-port={free_port()}",
        # the default worker port range is the same for every raylet on a machine: let the OS choose
        "--min-worker-port=0",
        "--max-worker-port=0",
        "--disable-usage-stats",
        f"--temp-dir={temp_dir}",
    ]


@contextlib.contextmanager
def started_two_nodes(
    moto_s3: Server, tmp: Path, head_cpus: int = 1, worker_cpus: int = 1, head_only: bool = False
) -> Iterator[Cluster]:
    """A head (``node_head``) of ``head_cpus`` logical CPUs and a worker node (``node_worker``) of
    ``worker_cpus``, token auth on (its own token, not ~/.ray's), both with the S3 endpoint's
    environment (as instance credentials would be on a real cluster). Each node has its own session
    folder, as every machine of a real cluster has its own /tmp/ray (sharing one, the worker node
    unpacked a job's working directory under the feet of the driver importing it: a
    ModuleNotFoundError now and then); :meth:`Cluster.kill_worker` and :meth:`Cluster.start_worker`
    take the worker node away and bring one back. With ``head_only`` the worker node runs in a
    mount namespace of its own where ``Cluster.head_only`` (a folder on this machine) is an empty
    tmpfs: a path there is one the head reads and the worker node cannot, as on two machines."""
    # Ray's unix sockets live under --temp-dir and AF_UNIX paths are capped at 107 bytes:
    # pytest's tmp paths are too long, so the session files go to short folders of our own.
    ray_tmp = Path(tempfile.mkdtemp(prefix="rt2n", dir="/tmp"))
    env = dict(moto_s3.env)
    env.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32), "PYTHONUNBUFFERED": "1"})
    gcs_port, dashboard_port = free_port(), free_port()
    url = f"http://127.0.0.1:{dashboard_port}"
    started: list[Server] = []
    try:
        head_cmd = ray_start(
            "--head",
            f"--port={gcs_port}",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={dashboard_port}",
            f"--ray-client-server-port={free_port()}",
            '--resources={"node_head": 1}',
            temp_dir=ray_tmp / "h",
            cpus=head_cpus,
        )
        head = start_ray_head(head_cmd, env, url, tmp, "ray-head")
        started.append(head)

        private = ray_tmp / "head-only"
        private.mkdir()

        def worker_cmd(n: int) -> list[str]:
            command = ray_start(
                f"--address=127.0.0.1:{gcs_port}",
                '--resources={"node_worker": 1}',
                temp_dir=ray_tmp / f"w{n}",
                cpus=worker_cpus,
            )
            if not head_only:
                return command
            hide = f'mount -t tmpfs none {private} && exec "$@"'
            return ["unshare", "--mount", "--propagation", "private", "sh", "-c", hide, "sh", *command]

        cluster = Cluster(
            url=url,
            env=env,
            head=head,
            worker=head,
            tmp=tmp,
            worker_cmd=worker_cmd,
            started=started,
            head_only=private,
        )
        cluster.start_worker()
        yield cluster
    finally:
        for server in reversed(started):  # the worker node first, then the head
            stop_group(server.process, grace=3)  # its files go with ray_tmp: no clean stop needed
        shutil.rmtree(ray_tmp, ignore_errors=True)
        # A killed `ray start` leaves its address in /tmp/ray/ray_current_cluster (only `ray stop`
        # removes it); left there, it stalls every later TorchTrainer run on this machine.
        forget_dead_ray_address()


@pytest.fixture(scope="module")
def two_nodes(moto_s3: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Two nodes of one CPU each (:func:`started_two_nodes`), one cluster for the module's jobs."""
    with started_two_nodes(moto_s3, tmp_path_factory.mktemp("two-nodes")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def uneven_two_nodes(moto_s3: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A head of 2 logical CPUs and a worker node of 3, each with its own session folder, the
    worker node killable and restartable, a folder only the head reads (:func:`started_two_nodes`)."""
    with started_two_nodes(
        moto_s3, tmp_path_factory.mktemp("uneven"), head_cpus=2, worker_cpus=3, head_only=True
    ) as cluster:
        yield cluster


def autoscaling_config(gcs_port: int) -> dict[str, Any]:
    """The fake provider's cluster: the head (0 CPUs, as on a real cluster) and two worker types
    that start from zero. ``gcs_address`` keeps its nodes off the fixed port 6379 (other Rays on
    this machine); the nodes go idle after 30 s (``idle_timeout_minutes: 0.5``). At 6 s the
    autoscaler once removed a node between two phases while Ray Data was placing a Parquet
    footer reader on it (``ActorDiedError``: "Terminated by autoscaler", dpo failed, stop 84)."""
    return {
        "cluster_name": "fake-autoscaling",
        "max_workers": 3,
        "upscaling_speed": 1.0,
        "idle_timeout_minutes": 0.5,
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

    def run_job(
        self, repo: Path, args: list[str], deadline_s: float, working_dir: bool = True
    ) -> tuple[dict[str, Any], str]:
        """``ray job submit`` of a phase, then its record once ended and its logs. Without
        ``working_dir`` the job runs the project as this venv has it installed (editable, from
        ``repo``): the fake provider's nodes share the head's session folder, and each node that
        first runs a job's worker unpacks the job's working directory there afresh (Ray's
        working_dir plugin overwrites it), under the feet of the workers of the nodes before it
        (their cwd gone: FileNotFoundError). On a real cluster every machine has its own."""
        job_id = f"autoscale-{uuid.uuid4().hex[:8]}"
        where = ["--working-dir", str(repo)] if working_dir else []
        cmd = [RAY, "job", "submit", "--address", self.url, "--submission-id", job_id, "--no-wait", *where]
        cmd += ["--", "python", "-m", *args]
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
def fake_cluster(moto_s3: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeCluster]:
    """The head of a fake_multinode cluster (``ray start --head --block``, its own ports, token
    and session folder, :func:`autoscaling_config`), with the S3 endpoint's environment as instance
    credentials would give it; the nodes its autoscaler starts are processes of the head's group,
    stopped with it."""
    tmp = tmp_path_factory.mktemp("fake-autoscaling")
    ray_tmp = Path(tempfile.mkdtemp(prefix="rtfa", dir="/tmp"))  # AF_UNIX paths are capped at 107 bytes
    gcs_port, dashboard_port = free_port(), free_port()
    config = tmp / "autoscaling.yaml"
    config.write_text(yaml.safe_dump(autoscaling_config(gcs_port), sort_keys=False))
    env = {
        k: v
        for k, v in os.environ.items()
        if k.startswith("RAY_TRAIN_") or not k.startswith(("RAY_", "MLFLOW_"))
    }
    env.update(moto_s3.env)
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
        f"--dashboard-agent-listen-port={free_port()}",
        f"--metrics-export-port={free_port()}",
        f"--ray-client-server-port={free_port()}",
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
