"""Processes lost with a node or killed are one line, exit 3 (:func:`cluster.errors.lost_processes`
on the errors Ray Train and Ray raise); anything else keeps its traceback."""

from __future__ import annotations

import pytest
import ray.exceptions as rex
from ray.train import WorkerGroupError
from ray.train.v2._internal.exceptions import UserExceptionWithTraceback, WorkerHealthCheckFailedError

from cluster.errors import LostWorkersError, lost_processes
from pipelines.common.phase import EXIT_LOST, exit_code


def _gone() -> rex.ActorUnavailableError:
    return rex.ActorUnavailableError("RpcError: failed to connect", None)


def test_a_killed_node_s_workers_are_lost_processes() -> None:
    # what a killed worker node gave: one rank's health check failed, the other's engine call
    # (inside its own code) found the engine actor gone
    failures = {
        0: WorkerHealthCheckFailedError("A worker health check failed.", _gone()),
        1: UserExceptionWithTraceback(_gone(), "Traceback ...\nActorUnavailableError"),
    }
    assert lost_processes(WorkerGroupError("two ranks", failures)) == [
        "WorkerHealthCheckFailedError",
        "ActorUnavailableError",
    ]
    assert lost_processes(rex.NodeDiedError("node gone")) == ["NodeDiedError"]
    # the surviving rank of a data-parallel pair: its all-reduce finds the dead one's socket closed
    peer = RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:64719")
    failures = {
        0: WorkerHealthCheckFailedError("A worker health check failed.", _gone()),
        1: UserExceptionWithTraceback(peer, "Traceback ...\nRuntimeError: Connection closed by peer"),
    }
    assert lost_processes(WorkerGroupError("a pair", failures)) == [
        "WorkerHealthCheckFailedError",
        "a learner peer's connection closed",
    ]


def test_a_bug_is_not_a_lost_process() -> None:
    bug = UserExceptionWithTraceback(ValueError("shapes"), "Traceback ...\nValueError: shapes")
    assert lost_processes(WorkerGroupError("one bug", {0: bug})) is None
    # a bug on one rank beside a lost one: the bug's traceback matters more
    mixed = {0: bug, 1: WorkerHealthCheckFailedError("A worker health check failed.", _gone())}
    assert lost_processes(WorkerGroupError("mixed", mixed)) is None
    assert lost_processes(ValueError("plain")) is None
    # an actor whose __init__ raised (a bad model path, no CUDA): its error, not "run it again"
    failed_start = rex.ActorDiedError(
        rex.RayTaskError("__init__", "Traceback ...", ValueError("no model here"))
    )
    assert failed_start.actor_init_failed and lost_processes(failed_start) is None


def test_lost_workers_are_one_line_and_exit_3(capsys: pytest.CaptureFixture[str]) -> None:
    def body() -> int:
        raise LostWorkersError("Ray processes this run needed were lost (NodeDiedError): run it again")

    assert exit_code(body) == EXIT_LOST == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: Ray processes this run needed were lost")
