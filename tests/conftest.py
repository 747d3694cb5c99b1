"""Shared fixtures: paths to the real data shipped in tests/data, and a clean environment.

Tiers: every test gets the marker of its folder (``unit``, ``integration``, ``system``); the heavy
end-to-end ones (a phase's driver killed and resumed, a whole graph, a sweep) also carry ``slow``.
``make check`` runs ``-m "not slow and not system"``; ``make test`` runs everything.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"
PGN = DATA / "pgn"

# Tests never talk to an MLflow server or a cluster they did not start themselves.
for _var in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS"):
    os.environ.pop(_var, None)
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# An s3:// URI without a region asks AWS for its bucket's region (cluster.storage.bucket_region):
# offline, that is 6 s per bucket before the default. Tests name the region (moto is region-free).
os.environ.setdefault("AWS_REGION", "us-east-1")

#: Ray Train settings for the tests (the product keeps Ray's health check). The controller polls
#: its workers every 2 s, and a worker's ``report`` waits until the controller has taken the one
#: before: every checkpoint a kill test waits for, and the end of every run, paid up to 2 s.
#: Subprocess drivers inherit it; Ray Train passes it on to its controller and workers. (The
#: preemption watcher is off in the product's learners themselves: pipelines.learner.)
TEST_RAY_ENV = {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.5"}
for _var, _value in TEST_RAY_ENV.items():
    os.environ.setdefault(_var, _value)

#: Every temporary file of a test process (the tests', the phases', their Ray workers') goes into
#: a folder of its own, removed when the session ends, so that a run leaves nothing behind and a
#: test can see what a phase left (:func:`_nothing_left_in_the_temporary_folder`). pytest's own
#: folders (``tmp_path``) and Ray's session folder stay where they were.
SYSTEM_TMP = os.environ.setdefault(
    "CHESS_RL_TESTS_SYSTEM_TMP", tempfile.gettempdir()
)  # xdist's workers: the controller's
os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", SYSTEM_TMP)
os.environ.setdefault("RAY_TMPDIR", SYSTEM_TMP)
TEST_TMP = Path(tempfile.mkdtemp(prefix="chess-rl-tests-", dir=SYSTEM_TMP))
os.environ["TMPDIR"] = str(TEST_TMP)
tempfile.tempdir = None  # gettempdir() reads TMPDIR again

#: What others leave in the temporary folder while a test runs: Python's multiprocessing (removed
#: when its process ends), torch's compile cache, Ray's folder and its lock files' folder (Ray
#: Train's checkpoint downloads and uploads lock there), an MLflow server's database lock, and a
#: bare ``mkdtemp()`` (the doctests' and the tests' own). Anything else new after a test is a leak
#: of the project's.
OTHERS_TEMPORARY = ("pymp-", "torchinductor_", "ray", "_ray_lockfiles", "db_init_lock-", "tmp")

TIERS = ("unit", "integration", "system")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    shutil.rmtree(TEST_TMP, ignore_errors=True)


@pytest.fixture(autouse=True)
def _nothing_left_in_the_temporary_folder() -> Iterator[None]:
    """Each test leaves nothing of the project's in the temporary folder: every phase, loader and
    learner removes the folders it made (a trainer's checkpoints, a model copied from S3, an
    exported model), or 161 runs of sft fill 13 GB of /tmp."""
    before = set(os.listdir(TEST_TMP))
    yield
    left = sorted(n for n in set(os.listdir(TEST_TMP)) - before if not n.startswith(OTHERS_TEMPORARY))
    assert not left, f"left behind in the temporary folder {TEST_TMP}: {', '.join(left)}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tier marker from the test's folder, so ``-m integration`` never misses a test; then
    the longest files first: the system tier, the integration files with ``slow`` runs, the other
    integration files, the unit files with a ``slow`` test, the other unit files, when
    pytest-xdist hands whole files to several processes (``TEST_WORKERS=2 make test``, and the
    unit tier's ``UNIT_WORKERS``: ``loadfile``, in this order), so the last file to start is a
    short one, not the five-minute rlaif graph or the compiled sft (the Makefile turns off xdist's
    own reorder by test count). Without xdist the folders' order stays (unit first)."""
    for item in items:
        tier = item.path.parent.name
        if tier in TIERS and item.get_closest_marker(tier) is None:
            item.add_marker(getattr(pytest.mark, tier))
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}

    def rank(item: pytest.Item) -> int:
        tier = item.path.parent.name
        if tier == "system":
            return 0
        if tier == "integration":
            return 1 if item.path in slow_files else 2
        return 3 if item.path in slow_files else 4

    items.sort(key=rank)  # stable: the order within each group stays the collection's


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def pgn_dir() -> Path:
    return PGN


_RAY_FORWARDED = re.compile(r"^(\x1b\[[0-9;]*m)?\((\w+ )?pid=\d+[^)]*\)")


def driver_output(text: str) -> str:
    """``text`` without the lines Ray forwards from its own processes (``(TrainController pid=1) ...``):
    a Ray Train controller may print its placement-group cleaner's traceback at any time."""
    return "\n".join(line for line in text.splitlines() if not _RAY_FORWARDED.match(line))


@pytest.fixture
def driver_err() -> object:
    """:func:`driver_output`, for tests that check the driver's stderr for tracebacks."""
    return driver_output
