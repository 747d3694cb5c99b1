"""The JSON record every bench writes next to its printed ratio, and the repository's root.

    write_record("bench/results/mcts.json", {"bench": "mcts", "ratio": 0.37})   # prints "record: ..."

The machine's CPU count, the Python version and a UTC timestamp are added to the record.

Every bench script imports this module (``from record import ROOT, write_record``: a script run as
``.venv/bin/python bench/<name>.py`` has ``bench/`` on ``sys.path``) before its ``chessrl``,
``cluster`` and ``pipelines`` imports (isort sorts it with the third-party ones, ahead of them):
importing it puts the repository root on ``sys.path``, so those resolve.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
#: Where each bench's JSON record goes unless ``--json`` says otherwise.
RESULTS = ROOT / "bench" / "results"


def write_record(path: str | Path, record: dict[str, Any]) -> Path:
    """Write ``record`` (plus cpu_count, python, timestamp) as sorted, indented JSON to ``path``."""
    full = {
        **record,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "timestamp": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(full, indent=2, sort_keys=True) + "\n")
    print(f"record: {out}")
    return out
