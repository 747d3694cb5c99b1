"""``--batch-size auto``: probe a model's training step at growing batch sizes, each probe in a
fresh Ray worker process (``max_calls=1``) so that its peak memory is its own, and pick the
largest size under a share of the device's memory; the answer is cached per (model, device,
sequence length), so the next run with the same three skips the probes.

    size = auto_batch_size("preset:tiny", length=256, log=print)          # probes, then caches
    size = auto_batch_size("preset:tiny", length=256, log=print)          # the cached answer

The pure parts (the probe step, the pick, the table, the cache file) are
:mod:`chessrl.lm.batch_size`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from chessrl.lm.batch_size import (
    PROBE_SIZES,
    ProbeResult,
    cache_key,
    default_cache_path,
    format_table,
    pick_batch_size,
    probe_device,
    read_cache,
    table_to_json,
    write_cache,
)
from cluster.errors import ConfigError


def _probe_in_fresh_process(model_ref: str, batch_size: int, length: int, device: str) -> dict[str, Any]:
    """A Ray task body: build or load the model, probe it, report the result and the device."""
    import torch

    from chessrl.arena.saved_models import load_saved_model
    from chessrl.lm.batch_size import device_memory_bytes, device_name, probe
    from chessrl.lm.models import build_model

    memory = device_memory_bytes(device)  # before the model: on a GPU, the free memory it may fill
    torch.manual_seed(0)
    if model_ref.startswith("preset:"):
        model, _ = build_model(model_ref.split(":", 1)[1])
    else:
        model, _ = load_saved_model(model_ref, "policy")
    result = probe(model, batch_size, length, device=device)
    return {"result": result.__dict__, "device": device_name(device), "memory": memory}


def probe_resources(use_gpu: bool, cpus: float) -> dict[str, float]:
    """The probe task's Ray resources: the learner's CPUs, and a GPU when the learner trains on
    one (the task then measures that GPU's memory, :func:`~chessrl.lm.batch_size.probe_device`).

    >>> probe_resources(True, 8.0), probe_resources(False, 2.0)
    ({'num_cpus': 8.0, 'num_gpus': 1}, {'num_cpus': 2.0, 'num_gpus': 0})
    """
    return {"num_cpus": cpus, "num_gpus": 1 if use_gpu else 0}


def auto_batch_size(
    model_ref: str,
    length: int,
    *,
    log: Callable[[str], None],
    use_gpu: bool = False,
    share: float = 0.6,
    cpus: float = 1.0,
    cache_path: Path | None = None,
    sizes: tuple[int, ...] = PROBE_SIZES,
) -> int:
    """The batch size for ``model_ref`` (``preset:<name>`` or a saved model's folder/URI) at
    ``length`` tokens a sequence: the cached one, or the largest probed size whose peak memory
    stays under ``share`` of the device's. A model that does not fit even one sequence is a
    ConfigError."""
    import ray

    from chessrl.lm.batch_size import device_name

    device = probe_device(use_gpu)
    # the key names the device the probes run on: on a GPU the probe reports it; on CPUs this
    # driver's machine stands for the (identical) nodes of a cluster
    here = device_name("cpu") if not use_gpu else "cuda"
    path = cache_path or default_cache_path()
    key = cache_key(model_ref, here, length)
    cached = read_cache(path, key)
    if cached is not None:
        log(
            f"batch size auto: {cached['batch_size']} (cached in {path} for {model_ref}, {here}, {length} tokens)"
        )
        return int(cached["batch_size"])
    task = ray.remote(max_calls=1, max_retries=0)(_probe_in_fresh_process).options(
        **probe_resources(use_gpu, cpus)
    )
    table: list[ProbeResult] = []
    memory = 0.0
    for size in sizes:
        got = ray.get(task.remote(model_ref, size, length, device))
        memory = got["memory"]
        result = ProbeResult(**got["result"])
        table.append(result)
        if result.error is not None or result.peak_bytes > share * memory:
            break
    chosen = pick_batch_size(table, memory, share)
    log(
        f"batch size auto for {model_ref} at {length} tokens on {here}:\n"
        + format_table(table, memory, share)
    )
    if chosen is None:
        raise ConfigError(
            f"--batch-size auto: {model_ref} needs more than {share:.0%} of the device's memory for one sequence of "
            f"{length} tokens; give a smaller --max-length or a device with more memory"
        )
    write_cache(
        path,
        key,
        {
            "batch_size": chosen,
            "model": model_ref,
            "device": here,
            "length": length,
            "share": share,
            "table": table_to_json(table),
        },
    )
    log(f"batch size auto: {chosen} (cached in {path})")
    return chosen
