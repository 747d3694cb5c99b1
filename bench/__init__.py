"""The benchmarks, run as scripts (``.venv/bin/python bench/<name>.py``). A script imports its
helpers (``record``, ``machine_load``, ``rl_common``, ``ppo_baseline``, ``grpo_baseline``) by their
own names, as it finds them beside it; imported as a package (``import bench.rl_step``), this
folder goes on the end of ``sys.path`` so that those imports find them the same way."""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.append(_HERE)
