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
import time

import pytest

pytestmark = pytest.mark.system


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
