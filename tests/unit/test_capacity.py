"""What a cluster can hold (cluster/capacity.py), without Ray: the autoscaler's node types read from
its config, the nodes it can still start, how engines are planned over alive and new nodes, and the
one line when no set of nodes can ever hold an ask."""

from __future__ import annotations

import doctest
import os
import sys
from pathlib import Path

import pytest
import yaml

import cluster.capacity
from cluster.capacity import Capacity, NodeType, autoscaler_config_path, holds_now, parse_autoscaling_config

ROOT = Path(__file__).resolve().parents[2]
HEAD0 = {"CPU": 0.0, "node:__internal_head__": 1.0, "node:10.0.0.1": 1.0, "memory": 8e9}
SMALL, BIG = NodeType("small", {"CPU": 1}, 0, 2), NodeType("big", {"CPU": 2, "accel": 1}, 0, 1)
FAKE = Capacity(alive=(HEAD0,), types=(SMALL, BIG), max_workers=3, source="fake.yaml")


def test_the_examples_in_the_module_hold() -> None:
    assert doctest.testmod(cluster.capacity).failed == 0


def test_the_node_types_of_the_clusters_yaml() -> None:
    """ray-cluster.yaml's worker types, its head left out, each with its resources and cap."""
    types, cap = parse_autoscaling_config(yaml.safe_load((ROOT / "ray-cluster.yaml").read_text()))
    assert cap == 13
    by_name = {t.name: t for t in types}
    assert "head" not in " ".join(by_name)  # the head's type is alive whenever anything runs
    gpus = sorted(t.resources.get("GPU", 0) for t in types)
    assert gpus[-1] == 8 and all(t.min_workers == 0 for t in types)
    cap_of = Capacity(alive=(HEAD0,), types=types, max_workers=cap)
    assert cap_of.autoscales and cap_of.largest("GPU") == 8 and cap_of.most("GPU") == 4 + 8


def test_a_type_without_max_workers_takes_the_clusters_cap_and_the_head_type_is_left_out() -> None:
    types, cap = parse_autoscaling_config(
        {
            "max_workers": 5,
            "head_node_type": "h",
            "available_node_types": {
                "h": {"resources": {"CPU": 4}},
                "w": {"resources": {"CPU": 2, "memory": 1e9}},
            },
        }
    )
    assert cap == 5 and [(t.name, dict(t.resources), t.max_workers) for t in types] == [
        ("w", {"CPU": 2.0}, 5)
    ]
    assert parse_autoscaling_config({}) == ((), None)


def test_nodes_it_can_start_count_the_alive_ones_and_the_cap() -> None:
    small_up = {"CPU": 1.0, "node:10.0.0.2": 1.0}
    assert [t.name for t in FAKE.launchable()] == ["big", "small", "small"]
    grown = Capacity(alive=(HEAD0, small_up), types=(SMALL, BIG), max_workers=2)
    assert [t.name for t in grown.launchable()] == ["big"]  # one small is up, the cap leaves room for one
    assert grown.most("CPU") == 1 + 2 and grown.most("accel") == 1
    gpu_last = Capacity(alive=(HEAD0,), types=(NodeType("g", {"CPU": 8, "GPU": 1}, 0, 1), SMALL))
    assert [t.name for t in gpu_last.launchable()] == ["small", "small", "g"]  # CPU work takes no GPU node


def test_default_cpus_are_the_alive_ones_or_the_first_node_it_would_start() -> None:
    assert FAKE.default_cpus() == 2
    assert Capacity(alive=({"CPU": 4.0},), types=(SMALL,)).default_cpus() == 4
    assert Capacity(alive=(HEAD0,)).default_cpus() == 1  # no autoscaler, no CPUs: at least one
    assert not Capacity(alive=(HEAD0,), types=(NodeType("x", {"CPU": 4}, 0, 0),)).autoscales


def test_engines_are_planned_over_the_alive_nodes_and_the_fewest_new_ones() -> None:
    from actors.engine_pool import engine_split

    assert FAKE.engine_nodes(1) == [2.0] and FAKE.engine_nodes(3) == [2.0, 1.0]
    assert engine_split(3, FAKE.engine_nodes(3)) == [2, 1]
    alive = Capacity(alive=(HEAD0, {"CPU": 1.0}), types=(SMALL, BIG), max_workers=3)
    assert alive.engine_nodes(1) == [1.0]  # the alive node is enough: nothing to start
    assert alive.engine_nodes(2) == [1.0, 2.0]
    with pytest.raises(
        ValueError,
        match=r"prepare.engines 9 .* can hold 4 engines at most \(1 node\(s\) alive .*"
        r"starts up to small ×2 \(CPU 1\), big ×1 \(CPU 2, accel 1\)\): ask for at most 4",
    ):
        engine_split(9, FAKE.engine_nodes(9), key="prepare.engines", nodes=FAKE.describe())


def test_an_ask_no_node_can_ever_hold_is_one_line_and_one_that_fits_is_none() -> None:
    line = FAKE.cannot_hold([{"CPU": 3}], "sft's 1 learner worker(s)")
    assert line is not None and "\n" not in line
    assert "one asks for CPU 3, which no node of this cluster has, nor any node type" in line
    assert "big ×1 (CPU 2, accel 1)" in line
    total = FAKE.cannot_hold([{"CPU": 2}] * 3, "grpo's 3 learner worker(s)")
    assert total is not None and "6 CPU in all, but this cluster can hold at most 4" in total
    assert FAKE.cannot_hold([{"CPU": 1, "accel": 1}], "x") is None  # fits the big type
    assert FAKE.cannot_hold([{"GPU": 1}], "sft.use_gpu") is not None
    static = Capacity(alive=({"CPU": 2.0, "node:__internal_head__": 1.0},))
    assert "nor any node type" not in (static.cannot_hold([{"CPU": 3}], "x") or "")


def test_holding_now_is_about_the_free_resources_of_the_alive_nodes() -> None:
    assert holds_now([{"CPU": 1}] * 2, [{"CPU": 2.0, "node:1": 1.0}])
    assert not holds_now([{"CPU": 1, "accel": 1}], [{"CPU": 4.0}])
    assert holds_now([], [])


def _process(proc: Path, pid: int, args: list[str], net: str = "net:[1]") -> None:
    (proc / str(pid) / "ns").mkdir(parents=True)
    (proc / str(pid) / "cmdline").write_bytes("\0".join(args).encode() + b"\0")
    os.symlink(net, proc / str(pid) / "ns" / "net")


def test_the_config_is_the_one_of_this_clusters_monitor_process(tmp_path: Path) -> None:
    """The monitor of the cluster whose GCS port matches, in this network namespace; a plain
    `ray start` monitor has no config; another cluster's monitor is not ours."""
    proc = tmp_path / "proc"
    (proc / "self" / "ns").mkdir(parents=True)
    os.symlink("net:[1]", proc / "self" / "ns" / "net")
    monitor = "/venv/lib/python3.11/site-packages/ray/autoscaler/_private/monitor.py"
    v2 = "/venv/lib/python3.11/site-packages/ray/autoscaler/v2/monitor.py"
    _process(
        proc, 10, ["python", "-u", monitor, "--gcs-address=10.0.0.1:6379", "--autoscaling-config=/a.yaml"]
    )
    _process(proc, 11, ["python", "-u", monitor, "--gcs-address=10.0.0.1:6380"])
    _process(proc, 12, ["python", "-u", v2, "--gcs-address=127.0.0.1:7000", "--autoscaling-config=~/b.yaml"])
    _process(
        proc,
        13,
        ["python", "-u", v2, "--gcs-address=127.0.0.1:7001", "--autoscaling-config=/c.yaml"],
        "net:[2]",
    )
    _process(proc, 14, ["python", "train.py", "--gcs-address=127.0.0.1:7002", "--autoscaling-config=/d.yaml"])
    assert autoscaler_config_path("6379", str(proc)) == "/a.yaml"
    assert autoscaler_config_path("6380", str(proc)) is None  # a monitor without a config: no autoscaler
    assert autoscaler_config_path("7000", str(proc)) == os.path.expanduser("~/b.yaml")
    assert autoscaler_config_path("7001", str(proc)) is None  # another network namespace's cluster
    assert autoscaler_config_path("7002", str(proc)) is None  # not a monitor


def test_outside_a_ray_session_sizing_uses_the_callers_count(monkeypatch) -> None:
    # the whole suite runs the unit tier after the integration tier's Ray session: none here
    monkeypatch.setitem(sys.modules, "ray", None)
    assert cluster.capacity.sizing_cpus(6) == (6, 6)


# -- the CPUs of a GPU worker ---------------------------------------------------------------------

CPU32 = NodeType("cpu_engine", {"CPU": 32}, 0, 8)
G5 = NodeType("gpu_train", {"CPU": 8, "GPU": 1}, 0, 4)  # g5.2xlarge: 8 CPUs, one A10G
P4D = NodeType("gpu_train_x8", {"CPU": 96, "GPU": 8}, 0, 1)
AWS = Capacity(alive=(HEAD0,), types=(CPU32, G5, P4D), max_workers=13, source="ray_bootstrap_config.yaml")


def test_a_gpu_worker_gets_the_cpus_its_gpu_comes_with_not_the_clusters() -> None:
    """On ray-cluster.yaml's types (a CPU type of 32, g5.2xlarge 8 + 1 GPU, p4d 96 + 8 GPUs) a GPU
    worker asks for 8 CPUs, which every GPU node holds once a GPU; a CPU worker for the CPU node's."""
    assert AWS.cpus_per_gpu() == 8
    assert [AWS.worker_cpus(n, use_gpu=True) for n in (1, 4, 8)] == [8, 8, 8]
    for n in (1, 4):  # every one of them fits the g5 type, the node that carries a single GPU
        worker = {"CPU": AWS.worker_cpus(n, use_gpu=True), "GPU": 1}
        assert AWS.cannot_hold([worker] * n, "sft") is None
    assert AWS.cannot_hold([{"CPU": 8, "GPU": 1}] * 12, "sft") is None  # 4 g5s and the p4d's 8
    assert AWS.worker_cpus(1) == 32 and AWS.worker_cpus(4) == 8  # CPU work: the CPU type's CPUs, split
    only_p4d = Capacity(alive=(HEAD0,), types=(CPU32, P4D))
    assert only_p4d.worker_cpus(8, use_gpu=True) == 12  # 96 CPUs over 8 GPUs


def test_gpu_nodes_alive_count_and_without_gpus_the_cluster_split_stays() -> None:
    machine = Capacity(alive=({"CPU": 16.0, "GPU": 1.0, "node:__internal_head__": 1.0},))  # one GPU box
    assert machine.cpus_per_gpu() == 16 and machine.worker_cpus(1, use_gpu=True) == 16
    two = Capacity(alive=({"CPU": 16.0, "GPU": 2.0},))
    assert two.worker_cpus(2, use_gpu=True) == 8
    laptop = Capacity(alive=({"CPU": 2.0, "node:__internal_head__": 1.0},))
    assert laptop.cpus_per_gpu() is None
    assert laptop.worker_cpus(1, use_gpu=True) == 2 == laptop.worker_cpus(1)  # no GPU: check_gpus says so
    assert laptop.worker_cpus(4) == 1  # at least one each
    fractional = Capacity(alive=({"CPU": 4.0, "GPU": 8.0},))
    assert fractional.cpus_per_gpu() == 1  # fewer CPUs than GPUs: one CPU a worker, not zero


def test_the_largest_node_beside_a_resource_and_the_sizing() -> None:
    assert AWS.largest() == 96 and AWS.largest("CPU", beside="GPU") == 96
    assert Capacity(alive=(HEAD0,), types=(CPU32, G5)).largest("CPU", beside="GPU") == 8
    assert Capacity(alive=(HEAD0,), types=(CPU32,)).largest("CPU", beside="GPU") == 0
    assert AWS.sizing() == (32, 32 * 8 + 8 * 4 + 96)  # the first CPU node; all the types hold
    assert Capacity(alive=(HEAD0, {"CPU": 4.0})).sizing() == (4, 4)  # no autoscaler: the alive CPUs


def test_grpo_and_ppo_size_their_learners_from_what_the_cluster_can_start() -> None:
    """From zero (a head of 0 CPUs): the engines, collectors and CPU learners sized to the CPU node
    the autoscaler would start, not to the head's 0 CPUs; a GPU learner to its GPU's 8 CPUs."""
    from pipelines.grpo import grpo_cpus
    from pipelines.ppo import ppo_cpus

    assert grpo_cpus(AWS, 8, 1, True) == (0.5, 8.0) and grpo_cpus(AWS, 8, 4, True) == (0.5, 8.0)
    assert grpo_cpus(AWS, 8, 1, False) == (0.5, 28.0)  # the 32-CPU node less the engines'
    engine, learner = grpo_cpus(AWS, 8, 2, False)  # two CPU workers, each beside its engines
    assert engine == 0.5 and 2 * learner + 8 * engine <= 2 * 32
    assert grpo_cpus(Capacity(alive=({"CPU": 16.0},)), 8, 1, False) == (0.5, 12.0)  # as before: one box
    assert ppo_cpus(AWS, 4, 2, 1, True) == (1.0, 1.0, 8.0, 8)
    assert ppo_cpus(AWS, 4, 2, 2, False) == (1.0, 1.0, 12.5, 13)
    box = Capacity(alive=({"CPU": 16.0, "GPU": 1.0, "node:__internal_head__": 1.0},))
    assert ppo_cpus(box, 4, 2, 1, True) == (1.0, 1.0, 9.0, 10)  # the collectors keep theirs beside it


def test_fractional_gpus_ask_the_autoscaler_for_the_whole_gpus_that_hold_them(monkeypatch) -> None:
    """preferences' 4 samplers at 0.25 GPU each (configs/cluster.yaml) need one whole GPU on a cluster
    that starts GPU nodes: one bundle of 1 GPU is asked for, not a list multiplied by a float."""
    from pipelines.learner import check_gpus

    asked: list[list[dict[str, float]]] = []
    monkeypatch.setattr(cluster.capacity, "read_capacity", lambda: AWS)
    monkeypatch.setattr(cluster.capacity, "ensure", lambda bundles, **_: asked.append(list(bundles)))
    check_gpus("preferences", 4 * 0.25, "preferences.sampler_gpus", "the 4 sampler(s) need 0.25 GPU each")
    check_gpus("preferences", 3 * 0.5, "preferences.sampler_gpus")
    assert asked == [[{"GPU": 1.0}], [{"GPU": 1.0}] * 2]
