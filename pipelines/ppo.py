"""``ppo``: actor-critic RL of the sft policy against the reward model (or Stockfish's grade of each
move: ``--reward stockfish``), on rollout collectors, a parameter server, RewardServers (or an
EnginePool) and a Ray Train learner.

    python -m pipelines.ppo --config tiny
    chess-rl ppo --kl-coef 0.05 --clip 0.2 --ppo-epochs 2 --collectors 2 --opponents self random stockfish:skill=0
    chess-rl ppo --policy runs/a/sft/model --reward-model runs/a/reward/model --iterations 200
    chess-rl ppo --reward stockfish --reward-nodes 2000     # no reward model: each move graded by Stockfish

How the pieces fit (the formulas are :mod:`chessrl.rl.ppo` and :mod:`chessrl.rl.policy_gradient`):

1. The driver checks its inputs (the policy, the reward model and their tokenizers, the opponent
   pool, the context length an episode needs), samples the episodes' start positions from the
   games table, and starts the ``ParameterServer``, ``--reward-servers`` RewardServers and
   ``--collectors`` RolloutCollectors (actors named ``<run>/<role>-<i>``).
2. Each collector plays ``concurrent_games`` episodes at once: the policy plays the side to move
   of a start position against an opponent of the pool (``self``, ``random``, weak Stockfish),
   one batched forward pass per move for all games, the RewardServer scores each legal move
   (``--reward stockfish``: the EnginePool's grade of it, :func:`chessrl.rl.ppo.scaled_grades`),
   newer weights are pulled between moves. A round is one rollout shard under ``rollouts/``.
3. The learner (a Ray Train ``TorchTrainer``, :mod:`pipelines.learner.ppo`) publishes its weights
   as version ``v``, reads the shards it has not read until it has ``episodes_per_iteration``
   episodes, drops episodes more than ``max_staleness`` versions old, adds the reference's
   log-probs and the critic's values, and takes ``ppo_epochs`` passes of clipped PPO (the first
   ``critic_warmup`` iterations train only the critic). Then it publishes ``v + 1``.
4. Every ``checkpoint_interval`` iterations: a Ray Train checkpoint (policy, critic, both
   optimisers, version, shards read). Running the same command again resumes from it.
5. At the end: the policy as a Hugging Face folder (``ppo/model``), the critic (``ppo/critic``),
   ``metrics.jsonl``, and a plot of the reward, KL and legal-move curves (``ppo/curves.png``).
   With ``--select-every N`` the policy is also saved every N iterations, each saved one plays
   its start, and the best of them is ``ppo/model`` (:mod:`pipelines.ppo_select`).

Measure the result with ``evaluate --mode sprt --players lm:<run>/ppo/model sft``.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chessrl.rl.ppo_types import PPOSettings
from cluster.capacity import Capacity, read_capacity
from cluster.progress import ProgressBoard
from cluster.storage import Storage
from pipelines.cli import one_line
from pipelines.common.artifacts import fit_games
from pipelines.common.phase import Inputs, Phase, PhaseContext, PhaseResult, model_location
from pipelines.config import PPOConfig
from pipelines.learner import check_gpus, final_metrics, torch_trainer
from pipelines.learner.loop import fit_then_stop, read_metrics, stop_collectors
from pipelines.learner.ppo import PPOLoopConfig, train_loop_per_worker
from pipelines.learner.quality import heldout_quality
from pipelines.learner.replay import stream_datasets
from pipelines.ppo_inputs import PPOInputs as PPOInputs
from pipelines.ppo_inputs import check_models as check_models
from pipelines.ppo_inputs import check_ppo as check_ppo
from pipelines.ppo_report import plot_curves, summary_lines

if TYPE_CHECKING:
    from actors.rollout import RolloutSpec

SUMMARY = one_line("ppo")
DESCRIPTION = (
    "Collectors play episodes against an opponent pool, the reward model scores every move, and a\n"
    "Ray Train learner runs clipped PPO with a critic and a KL penalty to the sft start. Example:\n"
    "  chess-rl ppo --iterations 40 --kl-coef 0.05 --opponents self random"
)


def ppo_settings(cfg: PPOConfig, text_format: str | None = None) -> PPOSettings:
    """The algorithm's knobs from the config section (``text_format``: the policy's, as
    :func:`check_ppo` resolved it; default the section's, else moves).

    >>> ppo_settings(PPOConfig(kl_coef=0.1)).kl_coef
    0.1
    """
    return PPOSettings(
        kl_coef=cfg.kl_coef,
        clip=cfg.clip,
        value_clip=cfg.value_clip,
        gamma=cfg.gamma,
        lam=cfg.lam,
        ppo_epochs=cfg.ppo_epochs,
        minibatch=cfg.minibatch,
        temperature=cfg.temperature,
        illegal_penalty=cfg.illegal_penalty,
        result_weight=cfg.result_weight,
        entropy_coef=cfg.entropy_coef,
        legal_coef=cfg.legal_coef,
        masked=cfg.masked,
        text_format=text_format or cfg.text_format or "moves",
        samples_per_state=cfg.samples_per_state,
        anchor_coef=cfg.anchor_coef,
    )


def rounds_per_version(cfg: PPOConfig) -> int:
    """Rounds a collector may play with one weights version: its share of an iteration's
    episodes, times ``1 + max_staleness`` (so collectors keep playing while the learner trains).

    >>> rounds_per_version(PPOConfig(episodes_per_iteration=64, collectors=1, concurrent_games=32, max_staleness=1))
    4
    """
    share = math.ceil(cfg.episodes_per_iteration / (cfg.collectors * cfg.concurrent_games))
    return share * (1 + cfg.max_staleness)


def split_ppo_cpus(cpus: float, collectors: int, reward_servers: int) -> tuple[float, float, float]:
    """CPUs each collector, reward server and the learner reserve; one CPU's worth stays free
    for the learner's Ray Data reads (which start no task while no CPU is free).

    >>> split_ppo_cpus(2, 1, 1)
    (0.25, 0.25, 0.5)
    >>> split_ppo_cpus(16, 4, 2)
    (1.0, 1.0, 9.0)
    """
    spare = max(cpus - 1, 1.0)
    units = collectors + reward_servers + 2  # the learner counts twice: it does the most work
    each = min(1.0, spare / units)
    learner = spare - (collectors + reward_servers) * each
    return each, each, float(learner if learner < 1 else int(learner))


def learner_threads(cpus: float, reserved: float) -> int:
    """Torch threads of the learner: the CPUs the collectors and reward servers do not reserve,
    rounded (the learner's own reservation is smaller by the one CPU left for Ray Data reads, but
    those reads mostly wait; the collectors mostly wait for new weights and so leave their CPUs
    idle while the learner trains).

    >>> learner_threads(2, 0.5)
    2
    >>> learner_threads(16, 6)
    10
    """
    return max(1, round(cpus - reserved))


def training_games(context: PhaseContext, cfg: PPOConfig, seed: int) -> list[list[str]] | None:
    """The games table's training games (sft's held-out split: the held-out games, whose
    positions the paired quality is measured on, stay out) as move lists, shuffled by ``seed``;
    None when there is no table."""
    import random

    from chessrl.lm.lm_data import split_games
    from pipelines.common.artifacts import read_games

    source = Storage.from_uri(cfg.games or context.phase_storage("prepare").uri_of("games"))
    if not cfg.games and not source.exists():
        return None
    rows, _, _ = split_games(read_games(source), context.config.sft.heldout_fraction)
    random.Random(seed).shuffle(rows)
    return [str(r["moves"]).split() for r in rows]


def start_pool(context: PhaseContext, cfg: PPOConfig, limit: int = 4096) -> list[tuple[str, ...]]:
    """Move lists the episodes start from: up to ``limit`` seeded training games, cut after
    ``max_start_ply + 1`` moves; only the start position when there is no table."""
    games = training_games(context, cfg, context.config.run.seed)
    pool = [tuple(m[: cfg.max_start_ply + 1]) for m in (games or [])[:limit]]
    return [m for m in pool if m] or [()]


def table_games(context: PhaseContext, cfg: PPOConfig, max_ply: int, limit: int = 4096) -> list[list[str]]:
    """Whole training games (cut at ``max_ply`` moves: what a moves reader's context holds) whose
    positions are ``table_positions``' one-move episodes; empty when the share is 0 or there is
    no table."""
    games = training_games(context, cfg, context.config.run.seed + 1) if cfg.table_positions > 0 else None
    return [m[:max_ply] for m in (games or [])[:limit] if m]


def heldout_legal_rates(
    context: PhaseContext, cfg: PPOConfig, models: dict[str, str], text_format: str = "moves"
) -> dict[str, dict[str, float]]:
    """The greedy legal-move rate and top-1 agreement of each model on ``cfg.heldout_positions``
    positions of the held-out games (the split sft used), asked in ``text_format``; empty
    without a games table."""
    from chessrl.arena.saved_models import load_saved_model
    from chessrl.lm.lm_data import split_games
    from chessrl.lm.lm_eval import evaluate_moves, sample_positions
    from pipelines.common.artifacts import read_games

    source = Storage.from_uri(cfg.games or context.phase_storage("prepare").uri_of("games"))
    if cfg.heldout_positions == 0 or (not cfg.games and not source.exists()):
        return {}
    _, held, _ = split_games(read_games(source), context.config.sft.heldout_fraction)
    held = fit_games(held, text_format, next(iter(models.values()), ""))
    positions = sample_positions(
        [(r["moves"], None) for r in held], cfg.heldout_positions, seed=context.config.run.seed
    )
    out = {}
    for name, path in models.items():
        model, tokenizer = load_saved_model(path, "policy")
        out[name] = evaluate_moves(model, tokenizer, positions, text_format=text_format) | {
            "positions": len(positions)
        }
    return out


@dataclass
class PPOActors:
    """The actors the ppo learner trains with: the parameter server (``server_name`` in
    ``namespace``), the reward servers' client (None when Stockfish grades the moves), the
    EnginePool of the grading engines or of the Stockfish opponents (or None), the rollout
    collectors and their runs."""

    server_name: str
    namespace: str
    server: Any
    reward: Any
    engine_pool: Any
    collectors: list[Any]
    runs: list[Any]

    def stop(self) -> list[dict[str, Any]]:
        """Stop them all; each collector's summary (or its error)."""
        summaries = stop_collectors(self.server, self.collectors, self.runs)
        if self.reward is not None:
            self.reward.shutdown()
        if self.engine_pool is not None:
            self.engine_pool.shutdown()
        return summaries


def ppo_cpus(
    cap: Capacity, collectors: int, reward_servers: int, workers: int, use_gpu: bool
) -> tuple[float, float, float, int]:
    """CPUs of each collector, each reward server and each learner worker, and the learner's
    threads, from the CPUs the cluster sizes a phase to (:meth:`~cluster.capacity.Capacity.sizing`:
    the alive nodes', or the first node its autoscaler would start; :func:`split_ppo_cpus`). A
    worker has no more than the largest node (one worker cannot span nodes) or, with ``use_gpu``,
    than a GPU comes with on the GPU nodes (:meth:`~cluster.capacity.Capacity.cpus_per_gpu`; just
    that on a cluster that autoscales: the collectors find room on the nodes it starts).

    >>> from cluster.capacity import NodeType
    >>> ppo_cpus(Capacity(alive=({"CPU": 16},)), 4, 2, 1, False)
    (1.0, 1.0, 9.0, 10)
    >>> head0 = {"CPU": 0, "node:__internal_head__": 1}
    >>> ppo_cpus(Capacity(alive=(head0,), types=(NodeType("c", {"CPU": 32}, 0, 8), NodeType("g5", {"CPU": 8, "GPU": 1}, 0, 4))), 4, 2, 1, True)
    (1.0, 1.0, 8.0, 8)
    """
    cpus = float(cap.sizing()[0])
    collector_cpus, server_cpus, learner_cpus = split_ppo_cpus(cpus, collectors, reward_servers)
    share = cap.cpus_per_gpu() if use_gpu else None
    largest = float(share) if share is not None else cap.largest("CPU") or 1.0
    if share is not None and cap.autoscales:  # the collectors go to CPU nodes, each worker to a GPU's
        return collector_cpus, server_cpus, largest, share
    threads = max(
        1,
        min(
            learner_threads(cpus, collectors * collector_cpus + reward_servers * server_cpus) // workers,
            int(largest),
        ),
    )
    return collector_cpus, server_cpus, min(learner_cpus / workers, largest), threads


def start_actors(
    context: PhaseContext, found: PPOInputs, collector_cpus: float, server_cpus: float
) -> PPOActors:
    """The parameter server, the reward servers, an EnginePool when an opponent is Stockfish, and
    the rollout collectors, each collector running (names from an earlier run released first)."""
    import ray

    from actors.parameter_server import ParameterServer
    from actors.rollout import RolloutCollector
    from cluster.runtime import on_driver_node, release_actor_name

    cfg, run = context.config.ppo, context.config.run
    namespace = ray.get_runtime_context().namespace
    server_name = f"{run.name}/parameter-server"
    names = [
        server_name,
        *(f"{run.name}/rollout-collector-{i}" for i in range(cfg.collectors)),
        *(f"{run.name}/reward-server-{i}" for i in range(cfg.reward_servers)),
    ]
    for name in names:
        release_actor_name(name, namespace)
    # on the driver's node, where no autoscaler takes it (and the weights it holds) away
    server = ParameterServer.options(
        name=server_name, namespace=namespace, scheduling_strategy=on_driver_node()
    ).remote()
    reward, engine_pool = _start_graders(context, found, server_cpus, namespace)
    spec = _rollout_spec(context, found, server_name, namespace, reward, engine_pool)
    collectors = [
        RolloutCollector.options(name=f"{run.name}/rollout-collector-{i}", num_cpus=collector_cpus).remote(
            spec, i
        )
        for i in range(cfg.collectors)
    ]
    runs = [c.run.remote() for c in collectors]
    return PPOActors(server_name, namespace, server, reward, engine_pool, collectors, runs)


def _start_graders(
    context: PhaseContext, found: PPOInputs, server_cpus: float, namespace: str
) -> tuple[Any, Any]:
    """What grades the moves: the reward servers' client, or (``ppo.reward: stockfish``) an
    EnginePool of ``ppo.reward_servers`` engines, which also plays a Stockfish opponent; else an
    EnginePool of one engine when an opponent is Stockfish. ``(reward client, engine pool)``,
    either None."""
    from actors.reward_server import RewardClient
    from cluster.runtime import release_actor_name

    cfg, run = context.config.ppo, context.config.run
    reward, engine_pool = None, None
    if cfg.reward == "stockfish":  # the engines grade the moves (and play a Stockfish opponent)
        from actors.engine_pool import EnginePool

        for i in range(cfg.reward_servers):
            release_actor_name(f"{run.name}/engine-pool-{i}", namespace)
        engine_pool = EnginePool.spread(
            cfg.reward_servers, run=run.name, num_cpus_per_engine=server_cpus, key="ppo.reward_servers"
        )
    else:
        reward = RewardClient.create(
            found.reward,
            cfg.reward_servers,
            run=run.name,
            num_cpus=server_cpus,
            threads=1,
            max_wait_ms=2.0,
            num_gpus=cfg.reward_server_gpus,
        )
    if engine_pool is None and any(o.kind == "stockfish" for o in found.opponents):
        from actors.engine_pool import EnginePool

        engine_pool = EnginePool.create(1, 1, run=run.name, num_cpus_per_engine=0.25)
    return reward, engine_pool


def _rollout_spec(
    context: PhaseContext, found: PPOInputs, server_name: str, namespace: str, reward: Any, engine_pool: Any
) -> RolloutSpec:
    """The ``RolloutSpec`` every collector of this invocation plays by: the policy, the settings,
    the opponents, where the shards go, and the parameter server, reward servers and EnginePool
    it talks to."""
    from actors.rollout import RolloutSpec

    cfg, run, phase = context.config.ppo, context.config.run, context.phase_storage("ppo")
    return RolloutSpec(
        run=run.name,
        rollout_uri=phase.uri_of("rollouts"),
        status_uri=phase.uri_of("collectors"),
        policy_path=found.policy,
        settings=ppo_settings(cfg, found.text_format),
        opponents=tuple(cfg.opponents),
        phase_uri=phase.uri,
        concurrent_games=cfg.concurrent_games,
        max_actions=cfg.max_actions,
        rounds_per_version=rounds_per_version(cfg),
        seed=run.seed,
        server_name=server_name,
        namespace=namespace,
        reward_servers=tuple(f"{run.name}/reward-server-{i}" for i in range(cfg.reward_servers))
        if reward
        else (),
        engine_pool=engine_pool,
        stockfish_nodes=cfg.stockfish_nodes,
        invocation=uuid.uuid4().hex,
        reward=cfg.reward,
        reward_nodes=cfg.reward_nodes,
        max_loss=cfg.max_loss,
        dead_zone=cfg.dead_zone,
        grade_scale=cfg.grade_scale,
        table_share=cfg.table_positions,
    )


def loop_config(context: PhaseContext, found: PPOInputs, threads: int, actors: PPOActors) -> PPOLoopConfig:
    """The learner loop's config (:func:`train_loop_per_worker` reads it as attributes)."""
    cfg, run = context.config.ppo, context.config.run
    return PPOLoopConfig(
        phase_uri=context.phase_storage("ppo").uri,
        policy_path=found.policy,
        reward_path=found.reward,
        settings=ppo_settings(cfg, found.text_format),
        seed=run.seed,
        iterations=cfg.iterations,
        episodes_per_iteration=cfg.episodes_per_iteration,
        max_staleness=cfg.max_staleness,
        critic_warmup=cfg.critic_warmup,
        learning_rate=cfg.learning_rate,
        critic_learning_rate=cfg.critic_learning_rate,
        checkpoint_interval=cfg.checkpoint_interval,
        time_limit_s=cfg.time_limit_minutes * 60 if cfg.time_limit_minutes else None,
        threads=threads,
        use_gpu=cfg.use_gpu,
        rollout_reader=cfg.rollout_reader,
        select_every=cfg.select_every,
        server_name=actors.server_name,
        namespace=actors.namespace,
        tracking_uri=context.tracking.uri,
        tracking_run_id=context.tracking.run_id,
    )


def run_ppo(context: PhaseContext) -> PhaseResult:
    """Check the inputs, start the actors, train, summarise."""
    cfg = context.config.ppo
    log = context.log
    phase = context.phase_storage("ppo")
    found = check_ppo(context.config, Inputs.of_context(context))
    if cfg.use_gpu:  # the GPUs asked for are there, before anything starts or is written
        check_gpus("ppo", cfg.num_workers, log=context.log)
    if cfg.reward_server_gpus and cfg.reward == "model":  # beside the learner's whole GPUs: not shared
        learner = cfg.num_workers if cfg.use_gpu else 0
        check_gpus(
            "ppo",
            learner + math.ceil(cfg.reward_servers * cfg.reward_server_gpus - 1e-9),
            "ppo.reward_server_gpus",
            f"the {cfg.reward_servers} reward server(s) need {cfg.reward_server_gpus:g} GPU each"
            + (f" beside the learner's {learner}" if learner else ""),
            log=context.log,
        )
    facts = found.facts
    assert facts is not None  # nothing is taken as given here
    pool = start_pool(context, cfg)
    # a moves prompt is the game so far: a table position must leave room for its move
    table = table_games(context, cfg, facts["moves_context"] - 2 if facts["moves_context"] else 10**6)
    phase.makedirs()
    phase.write_text("starts.json", json.dumps(pool))
    phase.write_text("table.json", json.dumps(table))
    collector_cpus, server_cpus, learner_cpus, threads = ppo_cpus(
        read_capacity(), cfg.collectors, cfg.reward_servers, cfg.num_workers, cfg.use_gpu
    )  # the section's cpus_per_worker and learner_threads win
    learner_cpus, threads = cfg.cpus_per_worker or learner_cpus, cfg.learner_threads or threads
    log(
        f"policy {found.policy}, "
        + (
            f"reward model {found.reward}"
            if found.reward
            else f"moves graded by Stockfish at {cfg.reward_nodes} nodes on the {cfg.grade_scale} scale"
        )
        + f" (vocab {facts['vocab']}, context {facts['context']}); "
        f"{len(pool)} start games; opponents {', '.join(o.text for o in found.opponents)}"
        + (
            f"; {cfg.table_positions:.0%} of the episodes one move at a position of {len(table)} training games"
            if table
            else ""
        )
    )
    actors = start_actors(context, found, collector_cpus, server_cpus)
    log(
        f"{cfg.collectors} collector(s) x {cfg.concurrent_games} games ({collector_cpus:g} CPU each), "
        f"{cfg.reward_servers} {'Stockfish' if cfg.reward == 'stockfish' else 'reward server(s)'}, learner {cfg.num_workers} worker(s) x {learner_cpus:g} CPU"
        f"{' + 1 GPU' if cfg.use_gpu else ''} ({threads} threads); {cfg.iterations} iterations of "
        f"{cfg.episodes_per_iteration} episodes, T={cfg.max_actions}, beta={cfg.kl_coef:g}, clip={cfg.clip:g}"
        + (f", at most {cfg.time_limit_minutes:g} min" if cfg.time_limit_minutes else "")
    )
    trainer = torch_trainer(
        context,
        "ppo",
        train_loop_per_worker,
        loop_config(context, found, threads, actors).train_loop_config(),
        num_workers=cfg.num_workers,
        cpus_per_worker=learner_cpus,
        use_gpu=cfg.use_gpu,
        progress=(board := ProgressBoard(log, "iteration", cfg.iterations)),
        **stream_datasets(cfg.rollout_reader, phase.child("rollouts")),
    )
    result, seconds, summaries = fit_then_stop(trainer, board, actors.stop)
    selection = {}
    if cfg.select_every and phase.exists("model/config.json"):  # the best candidate becomes the model
        from pipelines.ppo_select import select_policy

        selection = select_policy(context, found.policy)
    return summarise(context, found.policy, result, seconds, summaries, found.text_format, selection)


def summarise(
    context: PhaseContext,
    policy_path: str,
    result: Any,
    seconds: float,
    summaries: list[dict[str, Any]],
    text_format: str = "moves",
    selection: dict[str, Any] | None = None,
) -> PhaseResult:
    """The curves' plot, the start and final policies on held-out positions (the final one: the
    model, the candidate ``selection`` kept when ppo.select_every chose one), ``summary.json`` and
    the summary lines."""
    from actors.rollout import list_rollout_shards

    cfg, phase = context.config.ppo, context.phase_storage("ppo")
    final = final_metrics(result)
    rows = read_metrics(phase.child("logs"))
    if rows:
        with tempfile.TemporaryDirectory(prefix="ppo-plot-") as scratch:
            png = os.path.join(scratch, "curves.png")
            plot_curves(rows, png)
            phase.upload_file(png, "curves.png")
            context.tracking.log_artifact(png)
    heldout: dict[str, dict[str, float]] = {}
    quality: dict[str, Any] = {}
    if phase.exists("model/config.json"):
        final_path = model_location(None, phase.child("model"), "ppo", "ppo")
        context.log(
            f"trained in {seconds:.0f} s; the start and final policies on {cfg.heldout_positions} held-out positions"
        )
        heldout = heldout_legal_rates(context, cfg, {"start": policy_path, "final": final_path}, text_format)
        quality = heldout_quality(
            context,
            {"start": policy_path, "final": final_path},
            text_format,
            games=cfg.games,
            positions=cfg.heldout_positions,
            nodes=cfg.quality_nodes,
        )
    shards = list_rollout_shards(phase.child("rollouts"))
    learner = json.loads(phase.read_text("learner_state.json")) if phase.exists("learner_state.json") else {}
    starts = [int(s.get("starts", 1)) for s in summaries if "starts" in s]
    first, last = (rows[0], rows[-1]) if rows else ({}, {})
    summary = {
        "phase": "ppo",
        "iterations": int(final.get("iteration", 0)),
        "version": int(final.get("version", 0)),
        "episodes": int(final.get("episodes_total", 0)),
        "actions": int(final.get("actions_total", 0)),
        "stale_dropped": int(final.get("stale_dropped", 0)),
        "shards_written": len(shards),
        "shards_read": len(learner.get("read", [])),
        "collectors": summaries,
        "collector_restarts": sum(s - 1 for s in starts),
        "learn_seconds": round(seconds, 1),
        "first": first,
        "last": last,
        "model": phase.uri_of("model"),
        "critic": phase.uri_of("critic"),
        "heldout": heldout,
        "quality": quality,
        "start": policy_path,
        "text_format": text_format,
        "selection": selection or {},
    }
    phase.write_text("summary.json", json.dumps(summary, indent=2, sort_keys=True, default=str))
    lines = summary_lines(summary, cfg, seconds, phase.uri_of("curves.png"), seed=context.config.run.seed)
    return PhaseResult(summary=summary, lines=lines, ok=summary["iterations"] > 0)


PHASE = Phase(
    name="ppo",
    section="ppo",
    section_model=PPOConfig,
    run=run_ppo,
    check=check_ppo,
    folder="ppo",
    summary=SUMMARY,
    description=DESCRIPTION,
)
main = PHASE.main
if __name__ == "__main__":
    sys.exit(main())
