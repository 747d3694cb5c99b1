"""Data parallelism for the hand-written learner loops (``grpo``, ``ppo``): each worker learns
on its own share of an iteration's samples and the workers average their gradients before every
optimizer step, so their weights stay equal. Ray-free: it needs only the ``torch.distributed``
process group that Ray Train's ``TorchTrainer`` opens (gloo on CPUs, NCCL on GPUs); without one
(a single worker, a unit test) every function is the one-worker identity.

Why not ``DistributedDataParallel``: DDP all-reduces inside each ``backward()`` and needs every
worker to call it equally often, but a GRPO worker's minibatch count depends on how many of its
groups carry signal (flat groups are dropped) and a PPO worker's on its episodes. Averaging once
before the step, with a worker that had nothing to learn sending zeros, has no such constraint.

    >>> import torch
    >>> model = torch.nn.Linear(2, 1)
    >>> model(torch.ones(1, 2)).sum().backward()
    >>> average_gradients(model, 3.0)            # one worker: its gradients and its count
    3.0
    >>> world(), any_worker(False), sum_over_workers([1.0, 2.0])
    (1, False, [1.0, 2.0])
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def world() -> int:
    """How many workers learn together (1 without a process group)."""
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _collective_device() -> torch.device:
    """Where a collective's tensors must live: the GPU for NCCL, the CPU for gloo."""
    import torch.distributed as dist

    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def average_gradients(model: torch.nn.Module, work: float) -> float:
    """Average ``model``'s gradients over the workers, each weighted by its ``work`` (what its
    loss is a mean over: samples, actions, tokens), so the step is the one a single worker would
    take on all of it: ``sum_k work_k * grad_k / sum_k work_k``. A parameter without a gradient
    takes zeros, so a worker that learnt nothing this step still joins (with weight 0). Returns
    the total work; 0 means nobody learnt and nobody should step. Every worker must call it once
    a step, in the same order as the others."""
    import torch.distributed as dist

    if world() == 1:
        return float(work)
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    grads = [p.grad for p in params]
    weight = torch.tensor([float(work)], device=grads[0].device)
    flat = torch.cat([g.reshape(-1).float() * float(work) for g in grads] + [weight])
    here = flat.device
    flat = flat.to(_collective_device())
    dist.all_reduce(flat)
    flat = flat.to(here)
    total = float(flat[-1])
    at = 0
    for g in grads:
        n = g.numel()
        g.copy_((flat[at : at + n] / max(total, 1e-12)).view_as(g).to(g.dtype))
        at += n
    return total


def any_worker(flag: bool) -> bool:
    """True when ``flag`` is true on any worker (one decision for all: a time limit reached by one
    worker stops them all at the same iteration, so none waits on a collective forever)."""
    return bool(sum_over_workers([1.0 if flag else 0.0])[0] > 0)


def sum_over_workers(values: Sequence[float]) -> list[float]:
    """Each value summed over the workers (a metric's numerator and denominator, counts)."""
    import torch.distributed as dist

    if world() == 1:
        return [float(v) for v in values]
    t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=_collective_device())
    dist.all_reduce(t)
    return [float(v) for v in t.tolist()]


def max_over_workers(value: float) -> float:
    """The largest ``value`` any worker has (how many minibatches the busiest worker needs)."""
    import torch.distributed as dist

    if world() == 1:
        return float(value)
    t = torch.tensor([float(value)], dtype=torch.float64, device=_collective_device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def broadcast_objects(objects: list[object], source: int = 0) -> list[object]:
    """``objects`` as the ``source`` worker has them, on every worker (a list of picklable values)."""
    import torch.distributed as dist

    if world() == 1:
        return objects
    box = list(objects)
    dist.broadcast_object_list(box, src=source, device=_collective_device())
    return box


def gather_objects(value: object) -> list[object]:
    """Every worker's ``value`` (picklable), in rank order, on every worker."""
    import torch.distributed as dist

    if world() == 1:
        return [value]
    gathered: list[object] = [None] * world()
    dist.all_gather_object(gathered, value)
    return gathered


def metrics_over_workers(
    metrics: dict[str, float], weight: float, sums: Sequence[str] = (), maxes: Sequence[str] = ()
) -> dict[str, float]:
    """One iteration's metrics for all the workers: each key's mean weighted by ``weight`` (a
    worker's samples), except ``sums`` (counts, added up) and ``maxes`` (a step's timings: the
    slowest worker's). A key some worker lacks keeps this worker's value.

    >>> metrics_over_workers({"reward": 0.5, "samples": 8.0}, 8.0, sums=["samples"])
    {'reward': 0.5, 'samples': 8.0}
    """

    if world() == 1:
        return dict(metrics)
    parts = [(m, w) for m, w in gather_objects((metrics, float(weight)))]  # type: ignore[misc]
    out = dict(metrics)
    for key, value in metrics.items():
        values = [(m[key], w) for m, w in parts if isinstance(m.get(key), int | float)]
        if len(values) != len(parts) or not isinstance(value, int | float):
            continue
        if key in sums:
            out[key] = sum(v for v, _ in values)
        elif key in maxes:
            out[key] = max(v for v, _ in values)
        else:
            total = sum(w for _, w in values)
            out[key] = (
                sum(v * w for v, w in values) / total if total else sum(v for v, _ in values) / len(values)
            )
    return out
