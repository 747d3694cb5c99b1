"""Shared fixtures: paths to the real data shipped in tests/data, and a clean environment."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"
PGN = DATA / "pgn"

# Tests never talk to an MLflow server or a cluster they did not start themselves.
for _var in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS"):
    os.environ.pop(_var, None)
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


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
