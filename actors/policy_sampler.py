"""PolicySampler: a language-model policy behind a Ray actor that proposes moves for many
positions in one batched ``generate`` call (preferences now; rollouts reuse the same call).

    sampler = PolicySampler.options(name="demo/policy-sampler-0").remote("runs/demo/sft/model")
    ray.get(sampler.propose.remote(["e2e4 e7e5", ""], 4, 1.0, 7))   # 4 completions a prompt

A thin shell around :func:`chessrl.lm.models.propose_moves_batch`; the model loads once, from a folder
or an ``s3://`` prefix. ``max_restarts``: a killed sampler comes back and its call is retried.
"""

from __future__ import annotations

import time
from typing import Any

import ray
from ray.util import metrics


@ray.remote(num_cpus=1, max_restarts=3, max_task_retries=2)
class PolicySampler:
    """One copy of the policy; ``propose`` answers a batch of prompts."""

    def __init__(self, model_path: str, name: str = "policy-sampler", threads: int | None = None) -> None:
        import torch

        from actors.device import actor_device
        from chessrl.arena.saved_models import load_saved_model

        if threads:
            torch.set_num_threads(threads)
        self.model, self.tokenizer = load_saved_model(model_path, "policy")
        self.model.to(actor_device()).eval()  # its GPU when started with num_gpus
        self._tags = {"sampler": name}
        self._prompts = metrics.Counter("chessrl_sampler_prompts", "Prompts answered", tag_keys=("sampler",))
        self._seconds = metrics.Histogram(
            "chessrl_sampler_batch_s",
            "Seconds per batched generate",
            [0.05, 0.2, 1, 5, 20],
            tag_keys=("sampler",),
        )

    def propose(self, prompts: list[str], n: int, temperature: float, seed: int) -> list[list[str]]:
        """``n`` completions for each prompt (seeded: the same call gives the same answers)."""
        import torch

        from chessrl.lm.models import propose_moves_batch

        torch.manual_seed(seed)
        started = time.perf_counter()
        out = propose_moves_batch(self.model, self.tokenizer, prompts, n=n, temperature=temperature)
        self._seconds.observe(time.perf_counter() - started, tags=self._tags)
        self._prompts.inc(len(prompts), tags=self._tags)
        return out

    def info(self) -> dict[str, Any]:
        return {"parameters": sum(p.numel() for p in self.model.parameters()), "vocab": len(self.tokenizer)}
