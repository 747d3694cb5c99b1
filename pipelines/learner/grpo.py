"""The ``grpo`` learner, in its Ray Train worker (:func:`train_loop_per_worker`, started by
:func:`pipelines.grpo.run_grpo`): each iteration it samples groups of completions of the planned
prompts (and of the policy's own games' positions), scores them (Stockfish through the
EnginePool, python-chess) and takes one GRPO step; :class:`pipelines.learner.loop.LoopLearner`
does the resume, the reports, the checkpoints and the end.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from chessrl.rl.grpo_types import GRPOSettings, Prompt
from cluster.storage import Storage
from pipelines.common.artifacts import mark_text_format
from pipelines.learner import bf16_autocast, worker_place
from pipelines.learner.loop import LoopConfig, LoopLearner, export_pretrained, frozen_copy


@dataclass(frozen=True, kw_only=True)
class GRPOLoopConfig(LoopConfig):
    """What the grpo learner's workers read, built by the driver (:func:`pipelines.grpo.loop_config`)
    beside :class:`~pipelines.learner.loop.LoopConfig`'s fields, frozen: the workers read it as
    attributes. Every field is the driver's to set: the defaults are the config sections'
    (``grpo``, ``run``)."""

    policy_path: str
    """The start policy (a saved LM)."""
    settings: GRPOSettings
    """The algorithm's knobs."""
    text_format: str
    """What the policy reads (the own games' prompts, the exported model's record)."""
    own_opponent: str
    """Who answers the policy's moves in its own games (``self``, ``random``, ``start``, ...)."""
    seed: int
    """The run's seed (each worker's samples, the own games)."""
    prompts_per_iteration: int
    """Prompts an iteration, over all workers (the own-game ones included)."""
    learning_rate: float
    """The policy's AdamW learning rate."""
    minibatch: int
    """Samples per forward and backward pass of the update."""
    max_new_tokens: dict[str, int]
    """The longest answer of each task (``policy``, ``environment``), in tokens."""
    stockfish_nodes: int
    """Stockfish's nodes for each scored position."""
    engine_pool: Any
    """The :class:`actors.engine_pool.EnginePool` that scores the samples."""
    threads: int
    """Torch threads per worker (at most the machine's CPUs)."""
    use_gpu: bool
    """Each worker on its GPU."""


def train_loop_per_worker(loop_config: dict[str, Any]) -> None:
    """The learner: sample groups, score them, one GRPO step; checkpoint; repeat.

    ``loop_config`` is Ray Train's: a :class:`GRPOLoopConfig` under ``config``
    (:meth:`~pipelines.learner.loop.LoopConfig.of`). With several workers (``grpo.num_workers``)
    each takes every ``world``-th prompt of an iteration and its share of the own-game prompts,
    samples and scores them, and the workers average their gradients before the step
    (:mod:`chessrl.rl.data_parallel`); the first one logs, checkpoints and exports."""
    from chessrl.rl.data_parallel import any_worker

    cfg = GRPOLoopConfig.of(loop_config)
    worker = GRPOWorker.start(cfg)
    learner = worker.learner
    metrics: dict[str, Any] = {}
    while learner.state["iteration"] < cfg.iterations and not any_worker(learner.out_of_time()):
        metrics = worker.iteration()
        learner.record({**metrics, "workers": worker.world}, progress_line(metrics))
        learner.maybe_checkpoint(metrics)
    if worker.rank == 0:
        export_pretrained(
            worker.policy,
            worker.tokenizer,
            learner.phase.child("model"),
            "grpo-model-",
            partial(mark_text_format, text_format=cfg.text_format),
        )
    state = learner.state
    learner.finish({**metrics, "iteration": state["iteration"], "samples_total": state["samples"]})


@dataclass
class GRPOWorker:
    """One grpo learner worker, on its device: the policy and its optimizer, the frozen reference
    and the own games' start opponent (either may be None), the planned prompts, the policy's own
    games (None when this worker plays none), how samples are scored, and ``learner`` (the loop's
    state, reports and checkpoints).

        worker = GRPOWorker.start(cfg)
        metrics = worker.iteration()   # sample, score, one GRPO step: the metrics over all workers
    """

    cfg: GRPOLoopConfig
    rank: int
    world: int
    device: Any
    policy: Any
    tokenizer: Any
    reference: Any
    start_model: Any
    pad: int
    optimizer: Any
    learner: LoopLearner
    prompts: list[Prompt]
    own: int
    """Own-game prompts an iteration, over all workers (the plan's last of each iteration's)."""
    own_games: Any
    scores: Callable[..., list[Any]]
    norm_length: int

    @classmethod
    def start(cls, cfg: GRPOLoopConfig) -> GRPOWorker:
        """This worker's threads and device, the plan (``prompts.json``), the models, the optimizer
        and the loop, resumed from Ray Train's latest checkpoint if any (:func:`seed_worker`)."""
        import torch

        from chessrl.engine.client import SearchLimit
        from chessrl.rl.own_games import OwnGames

        torch.set_num_threads(max(1, min(int(cfg.threads), os.cpu_count() or 1)))
        rank, world, device = worker_place(cfg.use_gpu, "grpo")
        planned = json.loads(Storage.from_uri(cfg.phase_uri).read_text("prompts.json"))
        prompts = [Prompt(**p) for p in planned["prompts"]]
        own = int(planned["drawn"].get("own_per_iteration", 0))
        own_here = own_share(own, cfg.prompts_per_iteration, rank, world)
        policy, tokenizer, reference, start_model = learner_models(cfg, own_here, device)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        optimizer = torch.optim.AdamW(policy.parameters(), lr=cfg.learning_rate, weight_decay=0.0)
        learner = LoopLearner(
            "grpo",
            cfg,
            {"iteration": 0, "samples": 0, "seconds": 0.0},
            {"policy": policy, "optimizer": optimizer},
            extra=lambda: {
                "rng": torch.get_rng_state(),
                **({"cuda_rng": torch.cuda.get_rng_state(device)} if device.type == "cuda" else {}),
            },
            lead=rank == 0,
        )
        seed_worker(learner, cfg.seed, rank, device)
        scores = partial(engine_scores, cfg.engine_pool, SearchLimit(nodes=cfg.stockfish_nodes))
        # dr_grpo's constant length: the longest answer a task in the plan may give (the moves
        # format's one token, not the 128 of an environment task it never asks)
        norm_length = max(cfg.max_new_tokens[t] for t in {p.task for p in prompts})
        # the policy's own games (not checkpointed: after a resume they start again from the table)
        own_games = None
        if own_here:
            own_games = OwnGames(
                planned["starts"],
                live=own_here,
                text_format=cfg.text_format,
                opponent=cfg.own_opponent,
                seed=cfg.seed + 1009 * rank,
            )
        return cls(
            cfg,
            rank,
            world,
            device,
            policy,
            tokenizer,
            reference,
            start_model,
            pad,
            optimizer,
            learner,
            prompts,
            own,
            own_games,
            scores,
            norm_length,
        )

    def iteration(self) -> dict[str, Any]:
        """One iteration: this worker's share of the iteration's planned prompts (and of its own
        games' positions) sampled in groups, scored, one GRPO step (gradients averaged over the
        workers); the state counted on and the metrics over all workers returned."""
        import time

        from chessrl.rl.data_parallel import average_gradients, metrics_over_workers, sum_over_workers
        from chessrl.rl.grpo import grpo_update, sample_groups, score_samples

        cfg, settings, state = self.cfg, self.cfg.settings, self.learner.state
        per, first = cfg.prompts_per_iteration, state["iteration"] * cfg.prompts_per_iteration
        batch = self.prompts[first : first + per - self.own][self.rank :: self.world]
        t0 = time.perf_counter()
        self.policy.eval()
        with bf16_autocast(self.device):
            if self.own_games is not None:
                batch = batch + self.own_games.prompts(
                    self.policy, self.tokenizer, settings.temperature, start=self.start_model
                )
            samples = sample_groups(self.policy, self.tokenizer, batch, settings, cfg.max_new_tokens)
        t1 = time.perf_counter()
        score_samples(samples, self.scores, settings)
        t2 = time.perf_counter()
        with bf16_autocast(self.device):
            got = grpo_update(
                self.policy,
                self.reference,
                self.optimizer,
                samples,
                self.pad,
                settings,
                minibatch=cfg.minibatch,
                norm_length=self.norm_length,
                reduce=average_gradients if self.world > 1 else None,
            )
        t3 = time.perf_counter()
        state["iteration"] += 1
        (everyone,) = sum_over_workers([len(samples)])
        state["samples"] += int(everyone)
        return metrics_over_workers(
            iteration_metrics(state, samples, got, (t0, t1, t2, t3), self.learner.tick()),
            len(samples),
            sums=("samples", "trained_samples", "samples_per_s", "pairs"),
            maxes=("generate_s", "score_s", "learn_s", "elapsed_s"),
        )


def own_share(own: int, per_iteration: int, rank: int, world: int) -> int:
    """This worker's own-game prompts an iteration: the round robin of the planned ones
    ([rank::world], over an iteration's ``per_iteration``) goes on over the ``own`` last ones.

    >>> [own_share(3, 8, rank, 2) for rank in (0, 1)]    # prompts 5, 6, 7: ranks 1, 0, 1
    [1, 2]
    """
    fixed = per_iteration - own
    return sum(1 for i in range(own) if (fixed + i) % world == rank)


def seed_worker(learner: LoopLearner, seed: int, rank: int, device: Any) -> None:
    """Resume ``learner`` from Ray Train's latest checkpoint, if any; the lead of a resumed run
    takes back its torch RNG state, every other worker (and every one on a fresh start) draws its
    own samples from ``seed``, its rank and the iteration it resumes at."""
    import torch

    saved = learner.resume("learner resumes at iteration {iteration}")
    if saved is not None and rank == 0:
        torch.set_rng_state(saved["rng"])
        if "cuda_rng" in saved and device.type == "cuda":
            torch.cuda.set_rng_state(saved["cuda_rng"], device)
    else:  # each worker draws its own samples
        torch.manual_seed(seed + 1009 * rank + (int(learner.state["iteration"]) if saved else 0))


def learner_models(cfg: GRPOLoopConfig, own: int, device: Any = "cpu") -> tuple[Any, Any, Any, Any]:
    """The policy (on ``device``) and its tokenizer, the frozen reference of the KL penalty or of
    online DPO (None without one: beta 0 and another loss) and the own games' ``start`` opponent (the reference, or a copy of the
    start policy when there is none)."""
    import copy

    from chessrl.arena.saved_models import load_playing_model

    settings = cfg.settings
    policy, tokenizer = load_playing_model(cfg.policy_path)
    policy.to(device)  # before the optimizer and a resume's state: one device throughout
    reference = frozen_copy(policy) if settings.beta > 0 or settings.loss_type == "dpo" else None
    start_model = reference  # the own games' opponent "start": the frozen start policy
    if start_model is None and own and "start" in cfg.own_opponent:
        start_model = copy.deepcopy(policy).eval()
    return policy, tokenizer, reference, start_model


def engine_scores(pool: Any, limit: Any, fens: list[str], *, fresh: bool = False) -> list[Any]:
    """Stockfish's score of each position for its side to move (``Analysis.score``), from the
    EnginePool at ``limit`` (``fresh``: each from an empty hash, for a figure that must not depend
    on what was analysed before)."""
    return [a.score for a in pool.analyse(fens, limit, fresh=fresh)]


def iteration_metrics(
    state: dict[str, Any], samples: list[Any], got: dict[str, Any], times: tuple[float, ...], elapsed: float
) -> dict[str, Any]:
    """An iteration's metrics: the samples' (:func:`chessrl.rl.grpo.batch_metrics`), the update's,
    the counts and the timings (``times``: before generating, scoring, learning, and after)."""
    from chessrl.rl.grpo import batch_metrics

    t0, t1, t2, t3 = times
    own_rewards = [x.reward for x in samples if x.prompt.phase == "own"]
    return {
        "iteration": state["iteration"],
        **batch_metrics(samples),
        **got,
        **({"reward_own": sum(own_rewards) / len(own_rewards)} if own_rewards else {}),
        "samples": len(samples),
        "samples_total": state["samples"],
        "samples_per_s": len(samples) / max(t3 - t0, 1e-9),
        "generate_s": t1 - t0,
        "score_s": t2 - t1,
        "learn_s": t3 - t2,
        "elapsed_s": elapsed,
    }


def progress_line(metrics: dict[str, Any]) -> str:
    """An iteration's line on the driver's progress board."""
    return (
        f"reward {metrics['reward_mean']:+.3f} "
        f"(policy {metrics['reward_policy']:+.3f}, env {metrics['reward_environment']:.3f}), "
        f"legal {metrics['legal_rate']:.1%}, env exact {metrics['env_exact']:.1%}, "
        f"zero-variance groups {metrics['zero_variance_groups']:.0%}, KL {metrics['kl']:.4f}, "
        + (
            f"{int(metrics['pairs'])} pairs (ranked right {metrics['pair_accuracy']:.0%}), "
            if "pairs" in metrics
            else ""
        )
        + f"{metrics['samples_per_s']:.1f} samples/s (generate {metrics['generate_s']:.1f} s, "
        f"Stockfish {metrics['score_s']:.1f} s, learn {metrics['learn_s']:.1f} s)"
    )
