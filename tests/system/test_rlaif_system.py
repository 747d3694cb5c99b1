"""The whole ``rlaif`` graph on S3 (moto_server), started on a laptop and finished on a cluster.

First the command a newcomer types, on the embedded local Ray (``make demo``'s path), with its
input PGN, outputs and checkpoints on S3: killed with SIGKILL (driver, embedded Ray, workers)
once ``reward`` has a checkpoint Ray Train registered. Then the same command as one ``ray job
submit`` on an autoscaling cluster as ``ray up`` makes one, on Ray's own test provider
(``fake_multinode``, the ``fake_cluster`` fixture): a head with 0 CPUs and two worker node types
(1 CPU; 2 CPUs and a stand-in accelerator), ``min_workers: 0``, so no CPU at all when the job
starts. The phases that had finished are skipped (manifests and outputs untouched), reward
resumes from its checkpoint, the rest of the graph (ppo, grpo, online DPO, dpo, the head-to-head
evaluate) asks for nodes and runs to the end, every phase's manifest and outputs are in the
bucket, every task and actor of the job ran on a launched node, none on the head (Ray's state
API says where each one ran), and the idle nodes scale back down. The job is polled through the
head's HTTP API, not a CLI process every few seconds. (What
a changed section re-runs is ``tests/unit/test_graph.py``'s; this is the one whole-graph run of
the suite.)"""

from __future__ import annotations

import importlib.util
import io
import json
import re
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


# The servers' helpers of this folder's conftest, the integration tier's kill helper, and the
# smallest config on which the whole graph runs (the integration tier's), so that each stays one.
servers = _load(HERE / "conftest.py", "_system_servers")
KilledRun = _load(HERE.parent / "integration" / "conftest.py", "_integration_conftest").KilledRun
MICRO: dict[str, Any] = _load(HERE.parent / "integration" / "test_rlaif.py", "_integration_rlaif").MICRO
Cluster, FakeCluster, RAY = servers.Cluster, servers.FakeCluster, servers.RAY

PHASES = ("prepare", "sft", "preferences", "reward", "ppo", "grpo", "online-dpo", "dpo", "evaluate")
BUCKET = "rlaif-runs"
JOB_DEADLINE_S = 600  # the resumed job takes about 3 min on 2 loaded cores; each wait has its deadline


class Bucket:
    """The run's keys and bytes on S3, relative to its folder (``runs/<name>/``)."""

    def __init__(self, s3: Any, prefix: str) -> None:
        self.s3, self.prefix = s3, prefix

    def keys(self, under: str = "") -> set[str]:
        found: set[str] = set()
        for page in self.s3.get_paginator("list_objects_v2").paginate(
            Bucket=BUCKET, Prefix=f"{self.prefix}/{under}"
        ):
            found |= {o["Key"][len(self.prefix) + 1 :] for o in page.get("Contents", [])}
        return found

    def read(self, key: str) -> bytes:
        return self.s3.get_object(Bucket=BUCKET, Key=f"{self.prefix}/{key}")["Body"].read()

    def registered(self, phase: str) -> list[dict[str, Any]]:
        """The checkpoints Ray Train has recorded for ``phase``: the ones a resumed run may start from."""
        return servers.registered_checkpoints(self.s3, BUCKET, f"{self.prefix}/{phase}")


@pytest.fixture(scope="module")
def graph(
    fake_cluster: FakeCluster, moto_s3, s3, tmp_path_factory, repo: Path, pgn_dir: Path
) -> dict[str, Any]:
    """The micro graph killed during reward on the embedded Ray, then resumed as a job on the
    autoscaling cluster: what the test below looks at."""
    tmp = tmp_path_factory.mktemp("rlaif")
    s3.create_bucket(Bucket=BUCKET)
    s3.upload_file(str(pgn_dir / "masters" / "Firouzja.pgn.zst"), BUCKET, "input/Firouzja.pgn.zst")
    # The cluster config's rule: inputs and storage reachable from every node, so both on S3;
    # online DPO beside grpo, so its node runs in the graph and in the comparison.
    config = {
        **MICRO,
        "prepare": {**MICRO["prepare"], "inputs": [f"s3://{BUCKET}/input/Firouzja.pgn.zst"]},
        "rlaif": {**MICRO["rlaif"], "online_dpo": True},
    }
    config_path = tmp / "micro.yaml"  # read by the driver, which runs on this machine either way
    config_path.write_text(yaml.safe_dump(config))
    bucket = Bucket(s3, f"runs/{config['run']['name']}")
    command = [
        "python",
        "-m",
        "pipelines.rlaif",
        "--config",
        str(config_path),
        "--storage",
        f"s3://{BUCKET}/runs",
    ]

    # 1. The embedded local Ray, killed once reward has a registered checkpoint.
    env = {**moto_s3.env, "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)
    with KilledRun([sys.executable, *command[1:]], env=env, log=tmp / "first.log") as first:
        first.wait_for(lambda: bucket.registered("reward"), timeout=420, poll=1.0)
        alive = first.running
    manifests = {
        k for k in bucket.keys("rlaif/manifests/") if k.endswith(".json")
    }  # (not the folder's marker)
    finished = {Path(k).stem: bucket.read(k) for k in manifests if not k.endswith(".started.json")}
    reward_started = "rlaif/manifests/reward.started.json" in manifests
    sft_model = bucket.read("sft/model/model.safetensors") if finished else b""

    # 2. The same command as a job on the autoscaling cluster, from no worker node at all.
    nodes_before = fake_cluster.alive()
    started = time.monotonic()
    job, logs = fake_cluster.run_job(repo, command[2:], deadline_s=JOB_DEADLINE_S, working_dir=False)
    status = job.get("status") if job.get("status") in ("SUCCEEDED", "FAILED", "STOPPED") else None
    (tmp / "job.log").write_text(logs)
    print(
        f"\nrlaif job {job.get('submission_id')}: {status} after {time.monotonic() - started:.0f} s "
        f"(its log: {tmp / 'job.log'})"
    )
    print("\n".join(line for line in logs.splitlines() if line.startswith("[rlaif]")))
    return {
        "bucket": bucket,
        "config": config,
        "alive": alive,
        "first_log": (tmp / "first.log").read_text(),
        "finished": finished,
        "reward_started": reward_started,
        "sft_model": sft_model,
        "job": job,
        "status": status,
        "logs": logs,
        "nodes_before": nodes_before,
    }


def test_rlaif_killed_on_a_laptop_resumes_as_one_job_on_an_autoscaling_cluster_with_s3(
    graph: dict[str, Any], fake_cluster: FakeCluster
):
    bucket, first_log, logs, job = graph["bucket"], graph["first_log"], graph["logs"], graph["job"]
    assert graph["alive"], first_log[-3000:]  # killed while it ran, not after it ended
    assert graph["reward_started"]  # reward had started: the job resumes it
    assert set(graph["finished"]) == {"prepare", "sft", "preferences"}, first_log[-3000:]
    assert "Stockfish scores every legal move" in first_log  # reward's Spearman positions, once
    assert graph["status"] == "SUCCEEDED", (
        f"job: {graph['status'] or f'not finished in {JOB_DEADLINE_S} s'} ({job.get('message')})\n"
        f"{logs[-6000:]}\n{fake_cluster.log.read_text(errors='replace')[-3000:]}"
    )
    # the driver joined the cluster (not an embedded Ray of its own), which had no CPU then
    before = graph["nodes_before"]
    assert len(before) == 1 and not before[0]["resources_total"].get("CPU"), before
    assert "[rlaif] ray: joined cluster" in logs, logs[-3000:]
    assert "rlaif: graph state in s3://" in logs and "evaluate summary" in logs, logs[-3000:]
    assert "testing-secret" not in logs

    # The finished phases skipped, their manifests and outputs untouched; reward resumed.
    graph_json = json.loads(bucket.read("rlaif/graph.json"))
    assert {n["node"]: n["state"] for n in graph_json["nodes"]} == {
        **dict.fromkeys(("prepare", "sft", "preferences"), "skipped"),
        **dict.fromkeys(("reward", "ppo", "grpo", "online-dpo", "dpo", "evaluate"), "done"),
    }, graph_json
    assert all(bucket.read(f"rlaif/manifests/{n}.json") == b for n, b in graph["finished"].items())
    assert bucket.read("sft/model/model.safetensors") == graph["sft_model"]
    # the driver says what runs, and each learner's progress; no Ray worker line repeats it
    assert "[rlaif] plan: 6 phase(s) to run: reward, ppo, grpo, online-dpo, dpo, evaluate" in logs, logs[
        -3000:
    ]
    assert "[rlaif] plan: skipped (done with this config): prepare, sft, preferences" in logs
    for last in (
        "[reward] step 16/16 (100%)",
        "[ppo] iteration 2/2 (100%)",
        "[grpo] iteration 2/2 (100%)",
        "[dpo] step 2/2 (100%)",
    ):
        said = [line for line in logs.splitlines() if line.startswith(last.split(" ")[0])]
        assert last in logs, (last, said[-8:])
    assert not re.findall(
        r"\((RayTrainWorker|TrainController) pid=\d+\).*(\] iteration \d|\] step \d|\{'loss')", logs
    )
    assert "[reward] resuming from the checkpoint of step" in logs
    # reward resumed where its last registered checkpoint was and ran to its last step; the
    # Spearman positions were scored once, by the killed run
    reward = json.loads(bucket.read("reward/summary.json"))
    assert reward["steps"] == MICRO["reward"]["max_steps"]
    assert 0 < reward["resumed_from_step"] < MICRO["reward"]["max_steps"]
    assert f"resumed from step {reward['resumed_from_step']}" in logs
    assert "Stockfish scores every legal move" not in logs

    # Every phase's manifest and outputs are in the bucket.
    keys = bucket.keys()
    listing = "\n".join(sorted(k for k in keys if "/ray/" not in k))
    for phase in PHASES:
        manifest = json.loads(bucket.read(f"rlaif/manifests/{phase}.json"))
        assert manifest["key"] == graph_json["keys"][phase], (phase, manifest)
    assert not [k for k in keys if k.endswith(".started.json")], listing  # every phase finished
    for phase in ("sft", "reward", "ppo", "grpo", "online-dpo", "dpo"):
        assert f"{phase}/model/config.json" in keys, (phase, listing)
    assert json.loads(bucket.read("grpo/model/config.json"))["chessrl_text_format"] == "moves"
    online = json.loads(bucket.read("online-dpo/summary.json"))  # its own folder, beside grpo's
    assert online["phase"] == "online-dpo"
    logged = [json.loads(line) for line in bucket.read("online-dpo/logs/metrics.jsonl").decode().splitlines()]
    assert logged and all("pairs" in row and "dpo_loss" in row for row in logged)

    games = sorted(k for k in keys if k.startswith("prepare/games/") and k.endswith(".parquet"))
    summary = json.loads(bucket.read("prepare/summary.json"))
    assert summary["inputs"] == [f"s3://{BUCKET}/input/Firouzja.pgn.zst"]
    assert (
        games
        and sum(pq.read_table(io.BytesIO(bucket.read(k))).num_rows for k in games)
        == summary["games_written"]
        > 0
    )
    for split in ("train", "heldout"):
        shards = [k for k in keys if k.startswith(f"preferences/{split}/") and k.endswith(".parquet")]
        assert shards and sum(pq.read_table(io.BytesIO(bucket.read(k))).num_rows for k in shards) > 0, (
            split,
            listing,
        )

    # The comparison: each RL policy masked against its start (the sft) and the random mover,
    # the start against the random mover; the story of what RL did.
    results = json.loads(bucket.read("evaluate/eval/results.json"))
    model = f"s3://{BUCKET}/{bucket.prefix}"
    assert results["players"] == [
        f"lm:{model}/{name}/model,masked" for name in ("ppo", "grpo", "online-dpo", "dpo", "sft")
    ] + ["random"]
    assert results["games"] == 9 * graph["config"]["rlaif"]["compare_games"]
    assert "```mermaid" in bucket.read("rlaif/graph.md").decode()
    table = bucket.read("rlaif/comparison.md").decode()
    assert "What RL did" in table and "(anchor)" in table and "row vs column" in table
    story = table.split("What RL did")[1].split("The comparison's")[0]
    for phase in (
        "ppo",
        "grpo",
        "online-dpo",
        "dpo",
    ):  # its paired gain over its start, its games against the start and random
        row = next(line for line in story.splitlines() if line.strip().startswith(f"{phase} "))
        assert re.search(
            r"^\s*[\w-]+\s+sft\s+[+-]\d\.\d{4} \[[+-]\d\.\d{4}, [+-]\d\.\d{4}\] (better|worse|no change)"
            r"\s+\d+\.\d% \(\+\d+ =\d+ -\d+\)\s+\d+\.\d% \(\+\d+ =\d+ -\d+\)$",
            row,
        ), row
    assert "significant:" in story and "--mode sprt" in story
    assert (
        "The judge (the reward model;" in story and "(bar 80%)" in story
    )  # the judge's bar, and who reads it

    # The job's work ran on launched nodes: where the state API says each task and actor of the
    # job ran (the job's own Ray job id, so not the job supervisor's actor). The head (0 CPUs) holds
    # only what asks for no CPU: Ray's own bookkeeping actors (Ray Data's stats and autoscaling
    # coordinator, Ray Train's synchronisation, the collectors' queue).
    nodes = {n["node_id"]: n for n in fake_cluster.rows("nodes")}
    head = before[0]["node_id"]
    where: dict[str, Counter[str]] = {}  # node id -> what ran there
    on_head_with_cpus = []
    for kind, name_key in (("tasks", "name"), ("actors", "class_name")):
        for row in fake_cluster.rows(kind):
            if row.get("job_id") != job["job_id"] or not row.get("node_id"):
                continue
            where.setdefault(row["node_id"], Counter())[f"{kind[:-1]} {row[name_key]}"] += 1
            if row["node_id"] == head and float((row.get("required_resources") or {}).get("CPU", 0)) > 0:
                on_head_with_cpus.append(row[name_key])
    for node, ran in where.items():
        size = nodes[node]["resources_total"].get("CPU", 0) if node in nodes else "?"
        label = "head" if node == head else f"launched, {size} CPUs"
        print(
            f"{label} node {node[-6:]}: {sum(ran.values())} tasks and actors, most: {dict(ran.most_common(10))}"
        )
    assert not on_head_with_cpus, on_head_with_cpus
    launched = Counter(k.split(".")[0] for node, ran in where.items() if node != head for k in ran)
    assert launched["actor RayTrainWorker"] and launched["actor EnginePoolActor"], launched

    # Once the graph is done its nodes are idle, and go: nothing of its asks outlives it.
    deadline = time.monotonic() + 120
    while len(fake_cluster.alive()) > 1:
        assert time.monotonic() < deadline, fake_cluster.alive()
        time.sleep(2)


def test_annotate_spreads_its_engines_over_both_nodes(two_nodes: Cluster, s3, repo: Path):
    """Two Stockfish processes on a cluster of two one-CPU nodes: one engine actor on each node,
    each asking for one CPU (one actor asking for the cluster's two CPUs, as every phase's pool
    did, waits forever: no node holds it)."""
    s3.create_bucket(Bucket="annotate-runs")
    job_id = f"annotate-{uuid.uuid4().hex[:8]}"
    result = two_nodes.submit(
        [
            "--submission-id",
            job_id,
            "--no-wait",
            "--working-dir",
            str(repo),
            "--",
            "python",
            "-m",
            "pipelines.annotate",
            "--config",
            "tiny",
            "--run-name",
            "ann",
            "--no-tracking",
            "--storage",
            "s3://annotate-runs/runs",
            "--sources",
            "random",
            "--positions",
            "24",
            "--heldout-positions",
            "0",
            "--nodes",
            "20",
            "--engines",
            "2",
        ]
    )
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
