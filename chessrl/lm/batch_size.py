"""Automatic batch size, Ray-free: probe a model's training step at growing batch sizes, measure
its peak memory, pick the largest size under a share of the device's memory, and cache the
answer per (model, device, sequence length).

A probe is a few forward/backward/AdamW steps of a causal LM on random tokens. Its peak memory:
on a GPU the allocator's peak (``torch.cuda.max_memory_allocated``), on a CPU the process's peak
resident set (``ru_maxrss``), which only grows, so each CPU probe must run in a fresh process
(``pipelines/common/batch_size.py`` runs each in its own Ray worker process).

>>> table = [ProbeResult(1, 400e6, 0.10), ProbeResult(2, 500e6, 0.12), ProbeResult(4, 900e6, 0.2)]
>>> pick_batch_size(table, memory_bytes=1e9, share=0.8)
2
>>> print(format_table(table, memory_bytes=1e9, share=0.8))
batch  peak MB  of memory  step s  samples/s
    1      400      40.0%   0.100       10.0
    2      500      50.0%   0.120       16.7  <- picked
    4      900      90.0%   0.200       20.0  (over 80%)
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import resource
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

#: Sizes tried, in order, until one goes over the budget (or fails for lack of memory).
PROBE_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class ProbeResult:
    """One probe: the batch size, its peak memory in bytes and seconds per step (``error`` set
    when the probe failed, e.g. out of memory)."""

    batch_size: int
    peak_bytes: float
    step_s: float
    error: str | None = None


def pick_batch_size(table: Sequence[ProbeResult], memory_bytes: float, share: float) -> int | None:
    """The largest probed size that ran and peaked under ``share`` of ``memory_bytes``."""
    fits = [r.batch_size for r in table if r.error is None and r.peak_bytes <= share * memory_bytes]
    return max(fits) if fits else None


def format_table(table: Sequence[ProbeResult], memory_bytes: float, share: float) -> str:
    """The probes as the log shows them, the pick marked."""
    chosen = pick_batch_size(table, memory_bytes, share)
    lines = ["batch  peak MB  of memory  step s  samples/s"]
    for r in table:
        if r.error is not None:
            lines.append(f"{r.batch_size:>5}  failed: {r.error}")
            continue
        note = "  <- picked" if r.batch_size == chosen else ""
        if r.peak_bytes > share * memory_bytes:
            note = f"  (over {share:.0%})"
        lines.append(
            f"{r.batch_size:>5} {r.peak_bytes / 1e6:>8.0f} {r.peak_bytes / memory_bytes:>10.1%} "
            f"{r.step_s:>7.3f} {r.batch_size / max(r.step_s, 1e-9):>10.1f}{note}"
        )
    return "\n".join(lines)


def probe_device(use_gpu: bool) -> str:
    """The device the probes run on: the one the learner trains on (``cuda`` with ``use_gpu``,
    else ``cpu``), so that a GPU learner's batch is sized by the GPU's memory, not the CPU's.

    >>> probe_device(True), probe_device(False)
    ('cuda', 'cpu')
    """
    return "cuda" if use_gpu else "cpu"


def device_memory_bytes(device: str) -> float:
    """The memory a probe on ``device`` may fill (``cpu``: the machine's RAM; ``cuda``: the GPU's
    free memory, ``torch.cuda.mem_get_info``, read before the probe loads its model: what another
    process on the same GPU holds is not the learner's)."""
    if device.startswith("cuda"):
        free, _total = torch.cuda.mem_get_info(torch.device(device))
        return float(free)
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def device_name(device: str) -> str:
    """``cpu:<model>`` or ``cuda:<GPU name>``: part of the cache key."""
    if device.startswith("cuda"):
        return f"cuda:{torch.cuda.get_device_name(torch.device(device))}"
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"cpu:{model}:{os.cpu_count()}"


def peak_rss_bytes() -> float:
    """This process's peak resident set so far (Linux reports kB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return float(peak if sys.platform == "darwin" else peak * 1024)


def probe(
    model: torch.nn.Module, batch_size: int, length: int, *, steps: int = 3, device: str = "cpu"
) -> ProbeResult:
    """``steps`` AdamW steps of ``model`` (a causal LM) on random ``(batch_size, length)`` tokens;
    the first is a warm-up, the rest timed. On a CPU, call it in a fresh process."""
    vocab = int(model.config.vocab_size)  # type: ignore[attr-defined]
    model.to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(torch.device(device))
    ids = torch.randint(0, vocab, (batch_size, length), device=device)
    try:
        times = []
        for _ in range(max(2, steps)):
            start = time.perf_counter()
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
    except (RuntimeError, MemoryError) as exc:  # out of memory: the size does not fit
        return ProbeResult(batch_size, float("inf"), 0.0, str(exc).splitlines()[0][:120])
    peak = (
        float(torch.cuda.max_memory_allocated(torch.device(device)))
        if device.startswith("cuda")
        else peak_rss_bytes()
    )
    return ProbeResult(batch_size, peak, sorted(times[1:])[len(times[1:]) // 2])


def cache_key(model_id: str, device: str, length: int) -> str:
    """A stable key for (model, device, length).

    >>> cache_key("preset:tiny", "cpu:AMD EPYC:2", 256) == cache_key("preset:tiny", "cpu:AMD EPYC:2", 256)
    True
    """
    return hashlib.sha256(json.dumps([model_id, device, length]).encode()).hexdigest()[:16]


def default_cache_path() -> Path:
    """``$CHESSRL_CACHE_DIR`` or ``$XDG_CACHE_HOME/chess-rl`` or ``~/.cache/chess-rl``, file
    ``batch_sizes.json``."""
    root = os.environ.get("CHESSRL_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "chess-rl"
    )
    return Path(root) / "batch_sizes.json"


def read_cache(path: Path, key: str) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text()).get(key)
    except (OSError, ValueError):
        return None


def write_cache(path: Path, key: str, entry: dict[str, Any]) -> None:
    """Add ``entry`` under ``key`` (atomic replace; a corrupt file is started afresh)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    data[key] = entry
    tmp = path.with_suffix(f".tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)


def table_to_json(table: Sequence[ProbeResult]) -> list[dict[str, Any]]:
    return [{k: (None if v == float("inf") else v) for k, v in asdict(r).items()} for r in table]
