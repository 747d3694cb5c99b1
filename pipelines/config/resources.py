"""The part the learner sections share: the Ray Train workers of a phase's learner and what each
reserves. ``ppo`` and ``grpo`` (their own learner loop) inherit :class:`LearnerResources`;
``sft``, ``reward`` and ``dpo`` (TRL's trainer in each worker) :class:`TrainerResources`, which
takes whole CPUs (a worker's torch threads) and adds ``precision``. The keys stay flat in their
section (``sft.num_workers``, ``--num-workers``), each documented here once. ``selfplay``'s
learner has keys of its own (``learner_workers``, ``use_gpu``, ``amp``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from cluster.config import Section


class LearnerResources(Section):
    """The learner's Ray Train workers and what each reserves (``ppo``, ``grpo``)."""

    num_workers: int = Field(1, ge=1)
    """Learner workers (Ray Train, data-parallel): each learns on its share of the data (sft's
    blocks, reward's and dpo's pairs, ppo's episodes and grpo's prompts of every iteration) and
    they average their gradients before each step."""
    use_gpu: bool = False
    """A GPU for each learner worker (bf16 autocast where the GPU has it; sft, reward and dpo: as
    precision says)."""
    cpus_per_worker: float | None = Field(None, gt=0)
    """CPUs each learner worker reserves (a fraction shares one; default: the cluster's CPUs less
    what the phase's other actors reserve, ppo's collectors and reward servers keeping one free,
    grpo's engines, split among the workers; with use_gpu no more than the CPUs that come with a
    GPU on the GPU nodes, and just those on a cluster that autoscales)."""


class TrainerResources(LearnerResources):
    """The learner's Ray Train workers, TRL's trainer in each (``sft``, ``reward``, ``dpo``): whole
    CPUs, and the training precision."""

    cpus_per_worker: int | None = Field(None, ge=1)
    """CPUs each worker reserves (its torch threads); default: the cluster's CPUs split among workers,
    with use_gpu the CPUs that come with a GPU on the GPU nodes (8 on a g5.2xlarge)."""
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    """Training precision. auto: bf16 autocast on a GPU that has it and on a CPU that multiplies
    bf16 in hardware (AMX, AVX512-BF16: ~1.5x faster per step), fp32 elsewhere. Weights stay fp32."""
