"""A learner across two nodes of different sizes (2 and 3 logical CPUs, a custom resource on the
worker node, each node its own session folder), as one ``ray job submit`` with everything on S3
(moto_server): grpo's two data-parallel learner workers and its two engine actors run one on each
node, each asking for no more than its node has (the state API says where each ran). Then the
worker node is killed mid-phase: the job ends with one line naming what was lost, exit 3. The node
comes back and the same ``ray job submit`` resumes from the last checkpoint Ray Train had
registered on S3; after a checkpoint of its own one of its Ray Train workers is SIGKILLed with
the driver alive (one line, exit 3), and the same job again resumes from there and finishes: every iteration logged, the last run's iterations once each, the
counts of the finished run those of an unbroken one."""

from __future__ import annotations

import io
import json
import os
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from chessrl.data.pgn import read_pgn_file

pytestmark = [pytest.mark.system, pytest.mark.slow]

BUCKET = "two-node-runs"
# 36: after the node is killed the head's learner goes on until Ray notices (~15 iterations on a
# quiet machine), and the second run still needs a checkpoint of its own before the last one.
ITERATIONS, PROMPTS, GROUP = 36, 8, 4


@pytest.fixture(scope="module")
def inputs(s3, pgn_dir: Path, tmp_path_factory) -> None:
    """The bucket, with the start policy and the games (:func:`_upload_inputs`)."""
    s3.create_bucket(Bucket=BUCKET)
    _upload_inputs(s3, pgn_dir, tmp_path_factory.mktemp("inputs"))


def _upload_inputs(s3, pgn_dir: Path, tmp_path: Path) -> None:
    """The start policy (an untrained tiny board model) and 200 real games, on S3: inputs every
    node can read."""
    from chessrl.lm.models import build_model
    from pipelines.common.artifacts import mark_text_format

    model, tokenizer = build_model("tiny")
    start = tmp_path / "start"
    model.save_pretrained(start)
    tokenizer.save_pretrained(start)
    mark_text_format(start, "board")
    for path in start.iterdir():
        s3.upload_file(str(path), BUCKET, f"start/{path.name}")
    with open(pgn_dir / "lichess-2021-10-sample.pgn", "rb") as handle:
        records, _ = read_pgn_file(handle, "lichess")
    rows = records[:200]
    table = pa.table(
        {
            "game_id": [r.game_id for r in rows],
            "moves": [r.moves for r in rows],
            "result": [r.result for r in rows],
        }
    )
    sink = io.BytesIO()
    pq.write_table(table, sink)
    s3.put_object(Bucket=BUCKET, Key="games/part-0.parquet", Body=sink.getvalue())


def test_learner_on_two_uneven_nodes_survives_losing_one(
    uneven_two_nodes, inputs, s3, registered_on_s3, repo: Path, driver_err
):
    cluster = uneven_two_nodes
    prefix = "runs/uneven"

    def iterations() -> list[int]:
        """The iterations of the checkpoints Ray Train's snapshot on S3 records (empty: none yet)."""
        return [int(r["metrics"].get("iteration", 0)) for r in registered_on_s3(s3, BUCKET, f"{prefix}/grpo")]

    entrypoint = [
        "python",
        "-m",
        "pipelines.grpo",
        "--config",
        "tiny",
        "--run-name",
        "uneven",
        "--no-tracking",
        "--storage",
        f"s3://{BUCKET}/runs",
        "--policy",
        f"s3://{BUCKET}/start",
        "--games",
        f"s3://{BUCKET}/games",
        "--iterations",
        str(ITERATIONS),
        "--prompts-per-iteration",
        str(PROMPTS),
        "--group-size",
        str(GROUP),
        "--own-positions",
        "0",
        "--stockfish-nodes",
        "100",
        "--heldout-positions",
        "0",
        "--checkpoint-interval",
        "3",
        "--num-workers",
        "2",
        "--cpus-per-worker",
        "1.5",
        "--engines",
        "2",
    ]

    def submit() -> str:
        job_id = f"uneven-{uuid.uuid4().hex[:8]}"
        done = cluster.submit(
            ["--submission-id", job_id, "--no-wait", "--working-dir", str(repo), "--", *entrypoint]
        )
        assert done.returncode == 0, done.stderr[-2000:] + cluster.logs()
        return job_id

    def logs(job_id: str) -> str:
        done = cluster.cli("job", "logs", "--address", cluster.url, job_id, timeout=120)
        return done.stdout + done.stderr

    nodes = {n["node_id"]: n for n in cluster.state("nodes")}
    head = next(i for i, n in nodes.items() if n["resources_total"].get("node_head"))
    worker = next(i for i, n in nodes.items() if n["resources_total"].get("node_worker"))
    assert (nodes[head]["resources_total"]["CPU"], nodes[worker]["resources_total"]["CPU"]) == (2, 3)

    def running_until(job_id: str, recorded: Callable[[list[int]], bool]) -> None:
        """Wait, the job still running, until the checkpoints registered on S3 satisfy ``recorded``."""
        deadline = time.monotonic() + 300
        while not recorded(iterations()):
            assert cluster.job_status(job_id).get("status") in ("PENDING", "RUNNING"), logs(job_id)[-4000:]
            assert time.monotonic() < deadline, logs(job_id)[-4000:]
            time.sleep(1)

    def lost_in_one_line(job_id: str) -> None:
        """The job ended with the one line of processes lost, exit 3, no traceback of the driver's."""
        job = cluster.wait_job(job_id, deadline_s=180)
        text = logs(job_id)
        assert job.get("status") == "FAILED" and "exit code 3" in job.get("message", ""), (
            f"{job}\n{text[-4000:]}"
        )
        driver = [line for line in driver_err(text).splitlines() if line.startswith("error:")]
        assert len(driver) == 1 and "were lost" in driver[0] and "Run the same command again" in driver[0], (
            driver
        )
        assert "Traceback" not in driver_err(text)  # the driver's own lines (Ray's forwarded ones aside)

    first = submit()
    running_until(first, lambda steps: len(steps) >= 2)  # two checkpoints recorded, then the node goes
    ray_job = cluster.job_status(first)["job_id"]
    placed: dict[str, set[str]] = {}
    for actor in cluster.state("actors", f"job_id={ray_job}"):
        if actor["class_name"] in ("RayTrainWorker", "EnginePoolActor") and actor["state"] == "ALIVE":
            placed.setdefault(actor["class_name"], set()).add(actor["node_id"])
            cpus = sum(v for k, v in actor["required_resources"].items() if k.startswith("CPU"))
            assert cpus <= 3, actor  # no actor asks for more than the largest node
    assert placed == {"RayTrainWorker": {head, worker}, "EnginePoolActor": {head, worker}}, placed
    registered = max(iterations())
    assert registered < ITERATIONS, "the phase ended before the node could be killed"

    cluster.kill_worker()
    lost_in_one_line(first)
    registered = max(iterations())  # read after the kill: the oldest the rerun may resume from

    cluster.start_worker()

    def resumed_at(text: str) -> list[int]:
        return [
            int(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if "learner resumes at iteration" in line
        ]

    # the node back: the same job resumes; once it has registered a checkpoint of its own, a lone
    # Ray Train worker SIGKILLed, the driver alive: one line, exit 3; the same job again resumes.
    # (`ray job stop` is a driver ended from outside, as the integration kill tests' SIGKILL is.)
    second = submit()
    running_until(second, lambda steps, after=registered: max(steps) > after)
    ray_job = cluster.job_status(second)["job_id"]
    workers = [
        a
        for a in cluster.state("actors", f"job_id={ray_job}")
        if a["class_name"] == "RayTrainWorker" and a["state"] == "ALIVE" and a["node_id"] == head
    ]
    assert workers, "no learner worker alive on the head"
    os.kill(int(workers[0]["pid"]), signal.SIGKILL)
    lost_in_one_line(second)
    registered = max(iterations())  # after the kill
    assert registered < ITERATIONS, "the phase ended before its worker could be killed"

    third = submit()
    job = cluster.wait_job(third, deadline_s=300)
    third_logs = logs(third)
    assert job.get("status") == "SUCCEEDED", f"{job}\n{third_logs[-4000:]}\n{cluster.logs()}"
    resumed = resumed_at(third_logs)
    assert len(resumed) == 1 and registered <= resumed[0] < ITERATIONS, (registered, resumed)

    def read(key: str) -> bytes:
        return s3.get_object(Bucket=BUCKET, Key=f"{prefix}/{key}")["Body"].read()

    metrics = [json.loads(line) for line in read("grpo/logs/metrics.jsonl").decode().splitlines()]
    logged = [m["iteration"] for m in metrics]
    assert sorted(set(logged)) == list(range(1, ITERATIONS + 1)) and logged[-1] == ITERATIONS, logged
    again = logged[logged.index(resumed[0] + 1) if resumed[0] + 1 in logged else 0 :]
    assert again[-(ITERATIONS - resumed[0]) :] == list(range(resumed[0] + 1, ITERATIONS + 1)), logged
    assert all(m["workers"] == 2 and m["samples"] == PROMPTS * GROUP for m in metrics)
    summary = json.loads(read("grpo/summary.json"))
    assert summary["iterations"] == ITERATIONS and summary["samples"] == ITERATIONS * PROMPTS * GROUP
    assert json.loads(read("grpo/model/config.json"))["chessrl_text_format"] == "board"


def test_a_local_path_another_node_cannot_read_is_one_line(uneven_two_nodes, inputs, repo: Path, driver_err):
    """A model path on the head's disk alone (the worker node sees that folder empty): the job
    ends with one line naming the key, the path and the node, exit 2, before any work; on S3 (the
    test above) the same phase runs."""
    cluster = uneven_two_nodes
    policy = cluster.head_only / "sft-model"
    policy.mkdir(exist_ok=True)
    from chessrl.lm.models import build_model

    model, tokenizer = build_model("tiny")
    model.save_pretrained(policy)
    tokenizer.save_pretrained(policy)
    job_id = f"local-{uuid.uuid4().hex[:8]}"
    done = cluster.submit(
        [
            "--submission-id",
            job_id,
            "--no-wait",
            "--working-dir",
            str(repo),
            "--",
            "python",
            "-m",
            "pipelines.grpo",
            "--config",
            "tiny",
            "--run-name",
            "local",
            "--no-tracking",
            "--storage",
            f"s3://{BUCKET}/runs",
            "--games",
            f"s3://{BUCKET}/games",
            "--policy",
            str(policy),
            "--text-format",
            "moves",
            "--iterations",
            "1",
        ]
    )
    assert done.returncode == 0, done.stderr[-2000:]
    job = cluster.wait_job(job_id, deadline_s=120)
    logs = cluster.cli("job", "logs", "--address", cluster.url, job_id, timeout=120).stdout
    assert job.get("status") == "FAILED" and "exit code 2" in job.get("message", ""), f"{job}\n{logs[-3000:]}"
    errors = [line for line in driver_err(logs).splitlines() if line.startswith("error:")]
    assert len(errors) == 1, logs[-3000:]
    assert f"grpo.policy: {policy} is a local path that node" in errors[0] and "cannot read" in errors[0], (
        errors
    )
    assert "s3://" in errors[0] and "Traceback" not in driver_err(logs)
