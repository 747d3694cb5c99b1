"""Where an actor's model runs: its GPU when Ray gave it one (``num_gpus`` in its options), else
the CPU. ``RewardServer`` and ``PolicySampler`` move their model there when they start.

    self.model.to(actor_device())
"""

from __future__ import annotations

from typing import Any


def actor_device() -> Any:
    """``cuda`` when Ray assigned this actor a GPU, ``cpu`` otherwise; a GPU assigned to an actor
    whose torch cannot use it is one clear error (the CPU build of torch on a GPU node)."""
    import ray
    import torch

    if not ray.get_gpu_ids():
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError(
            f"this actor was given a GPU but its torch {torch.__version__} sees no CUDA device: install the CUDA "
            "build of torch on the GPU nodes (docs/cluster.md, 'GPUs')"
        )
    return torch.device("cuda")
