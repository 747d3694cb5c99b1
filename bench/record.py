"""The JSON record every bench writes next to its printed ratio.

    write_record("bench/results/mcts.json", {"bench": "mcts", "ratio": 0.37})   # prints "record: ..."

The machine's CPU count, the Python version and a UTC timestamp are added to the record.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
from pathlib import Path
from typing import Any


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
