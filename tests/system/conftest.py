"""Real servers on loopback, each in its own process group and stopped with it:
a Ray head (``ray start --head --block``), an S3 endpoint (``moto_server``), an MLflow server."""

from __future__ import annotations

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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

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


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "MLFLOW_", "AWS_"))}
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
        str(BIN / "ray"), "start", "--head", "--block",
        f"--port={free_port()}",
        "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard_port}",
        # The job agent's HTTP port is fixed (52365) by default: the integration tests' embedded Ray,
        # still alive in this pytest process, already holds it, and the job server would then
        # answer "No available agent" forever. Give this head ports of its own.
        f"--dashboard-agent-listen-port={free_port()}", f"--metrics-export-port={free_port()}",
        "--num-cpus=2", "--object-store-memory=1000000000",
        "--disable-usage-stats", f"--temp-dir={ray_tmp}",
    ]  # fmt: skip
    url = f"http://127.0.0.1:{dashboard_port}"
    # `ray start --block` stops the whole head if one helper process (e.g. the Ray Client server)
    # times out while the machine is loaded; one more try is cheaper than a flaky suite.
    for attempt in (1, 2):
        log = tmp / f"ray-start-{attempt}.log"
        process = start_group(cmd, log, env)
        server = Server(url=url, env=env, process=process, log=log)
        try:
            wait_http(f"{url}/api/version", process, timeout=120, ok_codes=(200, 401))
            break
        except RuntimeError:
            stop_group(process)
            if attempt == 2:
                raise
    try:
        yield server
    finally:
        stop_group(process)
        shutil.rmtree(ray_tmp, ignore_errors=True)
        # A killed `ray start` leaves its address in /tmp/ray/ray_current_cluster (only `ray stop`
        # removes it); left there, it stalls every later TorchTrainer run on this machine.
        forget_dead_ray_address()


@pytest.fixture(scope="module")
def moto_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A real S3 HTTP endpoint on loopback; ``env`` points boto3/pyarrow at it."""
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


@pytest.fixture
def s3(moto_s3: Server) -> Any:
    """A boto3 S3 client of ``moto_s3`` (for buckets and checks; the phases use their own)."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=moto_s3.url,
        aws_access_key_id=moto_s3.env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=moto_s3.env["AWS_SECRET_ACCESS_KEY"],
        region_name="us-east-1",
    )


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``mlflow server`` with a sqlite backend, one worker, on loopback."""
    tmp = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    env = base_env()
    cmd = [
        str(BIN / "mlflow"), "server",
        "--backend-store-uri", f"sqlite:///{tmp / 'mlflow.db'}",
        "--artifacts-destination", str(tmp / "artifacts"),
        "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
    ]  # fmt: skip
    process = start_group(cmd, tmp / "mlflow.log", env, cwd=tmp)
    url = f"http://127.0.0.1:{port}"
    server = Server(url=url, env=env, process=process, log=tmp / "mlflow.log")
    try:
        wait_http(f"{url}/health", process, timeout=120)
        yield server
    finally:
        stop_group(process, grace=10)
