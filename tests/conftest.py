"""Shared fixtures: paths to the real data shipped in tests/data, and a clean environment."""

from __future__ import annotations

import os
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
