"""How busy the machine was during a bench run, apart from the bench itself.

On a 2-CPU machine another process's load slows a 2-worker measurement more than a 1-process
baseline, so every bench reports it next to each run:

    result = timed(run_once, inputs)      # run_once returns a dict
    print(result["other_load_cores"])     # e.g. 0.03
"""

from __future__ import annotations

import contextlib
import time
from typing import Any


def cpu_snapshot() -> tuple[float, dict[int, float]] | None:
    """(busy CPU seconds of the whole machine, {pid: CPU seconds} of this process and its descendants)."""
    try:
        import psutil  # a dependency of Ray
    except ImportError:  # pragma: no cover
        return None
    times = psutil.cpu_times()
    busy = sum(getattr(times, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq", "steal"))
    own: dict[int, float] = {}
    me = psutil.Process()
    for proc in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            cpu = proc.cpu_times()
            own[proc.pid] = cpu.user + cpu.system
    return busy, own


def other_load(before: tuple[float, dict[int, float]] | None, seconds: float) -> float | None:
    """Cores that processes outside this bench kept busy, on average, since ``before``."""
    after = cpu_snapshot()
    if before is None or after is None or seconds <= 0:
        return None
    own = sum(t - before[1].get(pid, 0.0) for pid, t in after[1].items())
    return max(0.0, (after[0] - before[0] - own) / seconds)


def timed(fn: Any, *args: Any) -> dict[str, Any]:
    """``fn(*args)`` (a dict), with ``other_load_cores`` added."""
    before = cpu_snapshot()
    started = time.perf_counter()
    result = fn(*args)
    result["other_load_cores"] = other_load(before, time.perf_counter() - started)
    return result


def fmt_load(cores: float | None) -> str:
    return "n/a" if cores is None else f"{cores:.2f} cores"
