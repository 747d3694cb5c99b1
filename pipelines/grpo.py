"""``grpo``: GRPO of an sft policy with rewards verified by Stockfish and python-chess, on a Ray
Train learner and the EnginePool.

    python -m pipelines.grpo --config tiny
    chess-rl grpo --group-size 4 --policy-share 0.8 --loss-type dr_grpo --beta 0.04
    chess-rl grpo --text-format moves --policy-share 1 --policy runs/a/sft/model --stockfish-nodes 5000

``--text-format rookworld`` (RookWorld's tasks, from ``sft --text-format rookworld``) or ``moves``
(the game's moves so far → the next move, from the plain ``sft`` model; policy tasks only).

How the pieces fit (the formulas are :mod:`chessrl.rl.grpo` and :mod:`chessrl.rl.policy_gradient`):

1. The driver checks its inputs (the policy, Stockfish, the games table, the config), cuts
   positions from the training games in the configured phase mix (20% openings, 60%
   middlegames, 20% endgames) and turns them into prompts, ``policy_share`` policy tasks
   (``P: <FEN> M:``) and the rest environment tasks (``A: <FEN>+<move>+<history>+``), written to
   ``grpo/prompts.json`` with the mix drawn. It starts the EnginePool (``<run>/engine-pool-<i>``).
2. The learner (a Ray Train ``TorchTrainer``, :mod:`pipelines.learner.grpo`) takes
   ``prompts_per_iteration`` prompts per iteration and samples ``group_size`` completions of
   each (one batched generation per task, the prompt read once per group). Policy-task
   completions are scored by Stockfish at ``stockfish_nodes`` (one batched EnginePool call for
   the positions before and after every distinct legal move); environment-task completions are
   checked field by field against python-chess. Group advantages, then one optimizer step of the loss type's objective with a
   k3 KL to the frozen start.
3. Every ``checkpoint_interval`` iterations: a Ray Train checkpoint (policy, optimiser,
   iteration). Running the same command again resumes from it.
4. At the end: the policy as a Hugging Face folder (``grpo/model``), ``metrics.jsonl``, and the
   start and final policies' greedy legal-move rate and environment accuracy on positions of the
   held-out games (sft's split).

With ``--masked`` (the presets') policy-task moves are drawn from the legal moves only and scored
with the same masked log-probs by the learner and the reference (:mod:`chessrl.lm.masked`), a
legality term beside; ``--own-positions`` mixes in positions of the policy's own games. The
summary gives the start and final policies' paired move quality on the held-out positions
(:mod:`chessrl.arena.move_quality`). Measure play with ``evaluate --mode sprt --players
lm:<run>/grpo/model,masked lm:<start>,masked --adjudicate-cp 300``.
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass
from functools import partial
from typing import Any

from chessrl.rl.grpo_types import GRPOSettings, Prompt
from cluster.capacity import Capacity
from cluster.errors import ConfigError, StorageError
from cluster.progress import ProgressBoard
from cluster.storage import Storage
from pipelines.cli import one_line
from pipelines.common.artifacts import grpo_folder, sft_folder
from pipelines.common.phase import Inputs, Phase, PhaseContext, PhaseResult, gpt2_config, model_location
from pipelines.config import ChessRLConfig, GRPOConfig
from pipelines.grpo_report import summarise
from pipelines.learner import check_gpus, cpus_that_fit, torch_trainer
from pipelines.learner.grpo import GRPOLoopConfig, engine_scores, train_loop_per_worker
from pipelines.learner.quality import heldout_quality

SUMMARY = one_line("grpo")
DESCRIPTION = (
    "Samples groups of moves for positions of the games and of the policy's own games (with --masked,\n"
    "as the presets do: drawn from the legal moves), grades each against Stockfish's best, and takes GRPO steps with a KL penalty\n"
    "to the sft start; the start and final policies are compared on held-out positions (paired move\n"
    "quality). The presets ask the board format; --text-format moves asks for the next move of a move\n"
    "list; --text-format rookworld adds RookWorld's environment (A:) tasks, graded by python-chess. Example:\n"
    "  chess-rl grpo --config tiny --iterations 30\n"
    "  chess-rl grpo --text-format rookworld --policy-share 0.8 --own-positions 0"
)


def output_name(context: PhaseContext) -> str:
    """The name of this run's outputs folder: :func:`pipelines.common.artifacts.grpo_folder` of its loss
    type (``grpo``, or ``online-dpo``), unless the caller placed grpo's outputs elsewhere (a tune
    trial's folder, given as ``grpo``)."""
    return "grpo" if "grpo" in context.outputs else grpo_folder(context.config.grpo.loss_type)


def grpo_settings(cfg: GRPOConfig) -> GRPOSettings:
    """The algorithm's settings from the config section."""
    return GRPOSettings(
        group_size=cfg.group_size,
        loss_type=cfg.loss_type,
        beta=cfg.beta,
        clip=cfg.clip,
        clip_high=cfg.clip_high,
        temperature=cfg.temperature,
        illegal_reward=cfg.illegal_reward,
        max_loss=cfg.max_loss,
        masked=cfg.masked,
        legal_weight=cfg.legal_weight,
        dead_zone=cfg.dead_zone,
        std_floor=cfg.std_floor,
        drop_flat=cfg.drop_flat,
        pair_margin=cfg.pair_margin,
        rpo_alpha=cfg.rpo_alpha,
        dpo_beta=cfg.dpo_beta,
        grade_scale=cfg.grade_scale,
    )


def check_policy(path: str, log: Any, text_format: str = "rookworld", masked: bool = False) -> dict[str, Any]:
    """Load-free checks of the policy: a GPT-2-style LM whose tokenizer loads. A policy not
    trained on ``text_format`` (``chessrl_text_format`` in its config, written by sft) is a
    warning in the log, not an error: its rewards start low until it learns the format; but moves
    asked of a board policy, or the reverse, is a ConfigError (each has its own sft, nothing to learn)."""
    from chessrl.lm.checkpoints import load_tokenizer
    from chessrl.lm.models import move_tokens
    from pipelines.common.artifacts import TEXT_FORMAT_KEY, check_asked_format

    if _readable_scorer(path):
        return check_scorer_policy(path, text_format)
    config = gpt2_config(
        path,
        "grpo.policy (--policy)",
        "GPT2LMHeadModel",
        "grpo needs a GPT-2-style language model (GPT2LMHeadModel)",
    )
    tokenizer = load_tokenizer(path)
    if masked:
        from chessrl.lm.masked import check_maskable

        check_maskable(tokenizer, f"grpo.masked (--masked): the policy {path}")
    trained = config.get(TEXT_FORMAT_KEY)
    check_asked_format("grpo.text_format (--text-format)", text_format, path, trained)
    if text_format == "rookworld" and trained != "rookworld":
        log(
            f"warning: the policy {path} was not trained on the rookworld tasks (its text format: {trained or 'unknown'}); "
            "it will answer 'P: <FEN> M:' and 'A: ...' prompts poorly until GRPO teaches it the format. "
            "Train one with `chess-rl sft --text-format rookworld`, or ask it in its own format with --text-format moves"
        )
    elif (
        text_format != "rookworld"
        and trained != text_format
        and not (text_format == "moves" and trained is None)
    ):
        log(
            f"warning: the policy {path} was trained on the {trained or 'unknown'} format; --text-format {text_format} "
            "asks it in another, which it may answer poorly"
        )
    return {
        "context": int(config.get("n_positions", 1024)),
        "vocab": len(tokenizer),
        "move_tokens": move_tokens(tokenizer),
        "text_format": trained,
    }


def _readable_scorer(path: str) -> bool:
    """Whether ``path``'s config names a scorer; an unreadable one is left to :func:`gpt2_config`'s
    message."""
    from chessrl.arena.saved_models import scorer_checkpoint

    try:
        return scorer_checkpoint(path)
    except Exception:  # noqa: BLE001 - said by the language model's check, naming the key
        return False


def check_scorer_policy(path: str, text_format: str) -> dict[str, Any]:
    """A scorer as the policy (a reward model, ``chess-rl reward``'s output): a GPT-2 sequence
    classifier whose tokenizer loads. It reads each move in its own text format whatever
    ``text_format`` asks, so only the policy task's formats are allowed (its own games too).

    The facts' ``text_format`` is the scorer's own (what the exported model keeps)."""
    from chessrl.lm.checkpoints import load_tokenizer
    from chessrl.lm.models import move_tokens
    from pipelines.common.artifacts import TEXT_FORMAT_KEY

    config = gpt2_config(
        path,
        "grpo.policy (--policy)",
        "GPT2ForSequenceClassification",
        "grpo needs a GPT-2-style language model or a scorer (a reward model of chess-rl reward)",
    )
    if text_format == "rookworld":
        raise ConfigError(
            f"grpo.text_format (--text-format) is rookworld, but the policy {path} is a scorer (a reward "
            "model): it answers the policy task only; set text_format to moves, board or facts"
        )
    tokenizer = load_tokenizer(path)
    return {
        "context": int(config.get("n_positions", 1024)),
        "vocab": len(tokenizer),
        "move_tokens": move_tokens(tokenizer),
        "text_format": config.get(TEXT_FORMAT_KEY) or "moves",
        "scorer": True,
    }


def check_prompt_settings(cfg: GRPOConfig) -> dict[str, float]:
    """The position mix, normalised. The rules among the section's keys (a policy share the text
    format can give, a prompt for every learner worker, masked own games) are its validators."""
    from chessrl.data.positions import check_mix

    try:
        mix: dict[str, float] = check_mix(cfg.position_mix.model_dump())
    except ValueError as exc:
        raise ConfigError(f"grpo.position_mix: {exc}") from None
    return mix


@dataclass(frozen=True)
class GRPOInputs:
    """What ``grpo`` reads, checked: its settings, the policy and what :func:`check_policy` found
    (None while an earlier phase of the graph run still has to write the policy)."""

    settings: GRPOSettings
    policy: str
    facts: dict[str, Any] | None


def check_grpo(config: ChessRLConfig, inputs: Inputs, log: Any = lambda line: None) -> GRPOInputs:
    """Every input of ``grpo``, before Ray starts: its settings, the policy (a saved GPT-2 LM;
    by default the sft model of its text format), Stockfish, the prompts' settings and the games
    table, each unless an earlier phase of the same graph run writes it."""
    from chessrl.engine.client import find_stockfish
    from pipelines.common.artifacts import games_table

    cfg = config.grpo
    try:
        settings = grpo_settings(cfg)
    except ValueError as exc:
        raise ConfigError(f"grpo: {exc}") from None
    producer = "reward" if cfg.start == "judge" else sft_folder(cfg.text_format)
    policy_path = model_location(
        cfg.policy,
        inputs.folder(producer).child("model"),
        "grpo.policy (--policy)",
        "reward"
        if producer == "reward"
        else f"sft --text-format {cfg.text_format}"
        if cfg.text_format != "moves"
        else "sft",
        produced=inputs.will_write(producer),
    )
    facts = None
    if cfg.policy or not inputs.will_write(producer):
        facts = check_policy(policy_path, log, cfg.text_format, cfg.masked)
    find_stockfish()  # a missing engine is one clear line before any work
    check_prompt_settings(cfg)
    if cfg.games or not inputs.will_write("prepare"):
        games_table(Storage.from_uri(cfg.games or inputs.folder("prepare").uri_of("games")))
    return GRPOInputs(settings, policy_path, facts)


def plan_prompts(
    context: PhaseContext, cfg: GRPOConfig
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """Every iteration's prompts and the held-out prompts (as dicts), and the mix drawn."""
    from chessrl.data.positions import PositionSampler, phase_counts
    from chessrl.lm.lm_data import split_games
    from chessrl.rl.grpo import task_prompts
    from pipelines.common.artifacts import read_games

    mix = check_prompt_settings(cfg)
    seed = context.config.run.seed
    source = Storage.from_uri(cfg.games or context.phase_storage("prepare").uri_of("games"))
    rows = read_games(source)
    train, held, _ = split_games(rows, context.config.sft.heldout_fraction)
    if not train:
        raise StorageError(f"{source.uri} has no training games after the held-out split")
    total = cfg.iterations * cfg.prompts_per_iteration
    rng = random.Random(seed)
    positions = PositionSampler(train, seed=seed).sample(total, mix)
    prompts: list[Prompt] = []
    for i in range(cfg.iterations):  # the task mix holds in every batch, not only overall
        part = positions[i * cfg.prompts_per_iteration : (i + 1) * cfg.prompts_per_iteration]
        prompts += task_prompts(part, cfg.policy_share, rng, cfg.text_format)
    heldout: list[Prompt] = []
    if cfg.heldout_positions and held:
        heldout = task_prompts(
            PositionSampler(held, seed=seed + 1).sample(cfg.heldout_positions, mix),
            0.5 if cfg.text_format == "rookworld" else 1.0,
            random.Random(seed + 1),
            cfg.text_format,
        )
    own = round(cfg.prompts_per_iteration * cfg.own_positions)
    starts = []
    if own:  # where the policy's own games begin: positions of the training games, in the mix
        starts = [
            list(p.history) for p in PositionSampler(train, seed=seed + 2).sample(max(64, 8 * own), mix)
        ]
    tasks = Counter(p.task for p in prompts)
    drawn = {
        "games": len(rows),
        "train_games": len(train),
        "heldout_games": len(held),
        "phases": phase_counts(positions),
        "tasks": dict(tasks),
        "policy_share": tasks["policy"] / max(1, len(prompts)),
        "own_per_iteration": own,
        "starts": starts,
    }
    return [p.__dict__ for p in prompts], [p.__dict__ for p in heldout], drawn


def max_new_tokens(cfg: GRPOConfig, move_tokens: int) -> dict[str, int]:
    """Tokens a completion may take per task. The moves format's answer is one move: one token
    with the chess tokenizer (the token after it would be the opponent's reply, not the policy's)."""
    policy = move_tokens
    if cfg.text_format == "moves" and move_tokens == 2:
        policy = 1
    return {"policy": cfg.max_new_tokens_policy or policy, "environment": cfg.max_new_tokens_environment}


def heldout_scores(
    prompts: list[dict[str, Any]],
    models: dict[str, str],
    limits: dict[str, int],
    scores: Any = None,
    settings: GRPOSettings | None = None,
) -> dict[str, dict[str, float]]:
    """Each model's greedy legal-move rate and environment accuracy on the held-out prompts and,
    with ``scores`` (Stockfish's scores of positions), the policy reward of its greedy moves."""
    from chessrl.arena.saved_models import load_playing_model
    from chessrl.rl.grpo import evaluate_tasks

    if not prompts:
        return {}
    asked = [Prompt(**p) for p in prompts]
    out = {}
    for name, path in models.items():
        model, tokenizer = load_playing_model(path)
        out[name] = evaluate_tasks(model, tokenizer, asked, limits, scores, settings)
    return out


def grpo_cpus(cap: Capacity, engines: int, workers: int, use_gpu: bool) -> tuple[float, float]:
    """CPUs of each grading engine and of each learner worker its section does not size: the
    CPUs the cluster sizes a phase to (:meth:`~cluster.capacity.Capacity.sizing`: the alive
    nodes', or the first node its autoscaler would start), less the engines', split among the
    workers; no more than the largest node has (one worker cannot span nodes) or, with
    ``use_gpu``, than a GPU comes with on the GPU nodes (:meth:`~cluster.capacity.Capacity.cpus_per_gpu`;
    just that on a cluster that autoscales: the engines find room on the nodes it starts).
    Several CPU workers each fit on a node beside its share of the engines, planned over the
    alive nodes and those the autoscaler would start (:meth:`~cluster.capacity.Capacity.engine_nodes`).

    >>> from cluster.capacity import NodeType
    >>> grpo_cpus(Capacity(alive=({"CPU": 16},)), 8, 1, False)
    (0.5, 12.0)
    >>> head0 = {"CPU": 0, "node:__internal_head__": 1}
    >>> grpo_cpus(Capacity(alive=(head0,), types=(NodeType("c", {"CPU": 32}, 0, 8), NodeType("g5", {"CPU": 8, "GPU": 1}, 0, 4))), 8, 2, True)
    (0.5, 8.0)

    One worker beside its engine on a largest node of 2 CPUs: 1.5, so it fits wherever the engine goes:

    >>> small, big = NodeType("small", {"CPU": 1}, 0, 2), NodeType("big", {"CPU": 2}, 0, 1)
    >>> grpo_cpus(Capacity(alive=(head0, {"CPU": 1}, {"CPU": 2}), types=(small, big)), 1, 1, False)
    (0.5, 1.5)
    """
    from actors.engine_pool import engine_split

    cpus = float(cap.sizing()[0])
    engine_cpus = min(0.5, cpus / 4)
    share = cap.cpus_per_gpu() if use_gpu else None
    most = float(share) if share is not None else cap.largest("CPU") or 1.0
    learner_cpus = max(0.5, min((cpus - engines * engine_cpus) / workers, most))
    if share is not None and cap.autoscales:  # the engines go to CPU nodes, each worker to a GPU's
        learner_cpus = float(share)
    elif share is None and workers == 1 and engines * engine_cpus < most:
        # the engines may all land on the learner's node: leave them room there
        learner_cpus = max(0.5, min(learner_cpus, most - engines * engine_cpus))
    elif workers > 1 and share is None:  # each worker on one node, beside its engines
        nodes = cap.engine_nodes(engines, engine_cpus)
        split = engine_split(engines, nodes, engine_cpus, key="grpo.engines", nodes=cap.describe())
        free = [c - e * engine_cpus for c, e in zip(nodes, split, strict=True)]
        learner_cpus = max(0.5, cpus_that_fit(free, workers, learner_cpus) or 0.5)
    return engine_cpus, learner_cpus


def learner_resources(
    context: PhaseContext,
    cfg: GRPOConfig,
    policy_path: str,
    prompts: list[dict[str, Any]],
    limits: dict[str, int],
    scorer: bool = False,
) -> tuple[float, float, int]:
    """CPUs of each engine and of the learner (:func:`grpo_cpus`; the section's
    ``cpus_per_worker`` wins), and the learner's minibatch (``auto``: measured for the longest
    prompt)."""
    from cluster.capacity import read_capacity

    engine_cpus, learner_cpus = grpo_cpus(read_capacity(), cfg.engines, cfg.num_workers, cfg.use_gpu)
    learner_cpus = cfg.cpus_per_worker or learner_cpus
    batch_size = cfg.batch_size
    if batch_size == "auto" and scorer:
        batch_size = 64  # the probe measures a language model's pass; a scorer's reads every legal move
        context.log("batch size auto: 64 samples (a scorer policy: no probe)")
    if batch_size == "auto":
        from chessrl.lm.checkpoints import load_tokenizer
        from chessrl.lm.models import prompt_ids
        from pipelines.common.batch_size import auto_batch_size

        tokenizer = load_tokenizer(policy_path)
        longest = max(len(prompt_ids(tokenizer, p["text"])) for p in prompts)
        # probed on the device the learner trains on: with use_gpu a GPU, and its free memory
        batch_size = auto_batch_size(
            policy_path,
            longest + max(limits.values()),
            log=context.log,
            use_gpu=cfg.use_gpu,
            share=cfg.auto_batch_memory_share,
            cpus=learner_cpus,
        )
    return engine_cpus, learner_cpus, batch_size


def log_plan(context: PhaseContext, found: GRPOInputs, drawn: dict[str, Any], learner_cpus: float) -> None:
    """What the run trains: the policy, the prompts' mix, the iterations, Stockfish, the learner."""
    cfg, facts = context.config.grpo, found.facts
    assert facts is not None  # nothing is taken as given here
    context.log(
        f"policy {found.policy} (vocab {facts['vocab']}, context {facts['context']}); {drawn['train_games']:,} training games: "
        f"positions {', '.join(f'{k} {v}' for k, v in drawn['phases'].items())}; tasks "
        f"{drawn['tasks'].get('policy', 0)} policy / {drawn['tasks'].get('environment', 0)} environment "
        f"({drawn['policy_share']:.0%} policy)"
    )
    context.log(
        f"{cfg.iterations} iterations of {cfg.prompts_per_iteration} {cfg.text_format} prompts x {cfg.group_size} completions, "
        f"loss {cfg.loss_type}, beta {cfg.beta:g}, clip {cfg.clip:g}, temperature {cfg.temperature:g}; "
        f"Stockfish {cfg.stockfish_nodes} nodes on {cfg.engines} engine(s); learner {cfg.num_workers} worker(s) x "
        f"{learner_cpus:g} CPU"
        + (" + 1 GPU" if cfg.use_gpu else "")
        + (f", at most {cfg.time_limit_minutes:g} min" if cfg.time_limit_minutes else "")
    )


def loop_config(
    context: PhaseContext,
    found: GRPOInputs,
    limits: dict[str, int],
    batch_size: int,
    pool: Any,
    learner_cpus: float,
) -> GRPOLoopConfig:
    """The learner loop's config (:func:`pipelines.learner.grpo.train_loop_per_worker` reads it as
    attributes)."""
    cfg, run = context.config.grpo, context.config.run
    return GRPOLoopConfig(
        phase_uri=context.phase_storage(output_name(context)).uri,
        policy_path=found.policy,
        settings=found.settings,
        # a scorer keeps the text format it reads; a language model, the one it was asked in
        text_format=found.facts["text_format"]
        if found.facts and found.facts.get("scorer")
        else cfg.text_format,
        own_opponent=cfg.own_opponent,
        seed=run.seed,
        iterations=cfg.iterations,
        prompts_per_iteration=cfg.prompts_per_iteration,
        learning_rate=cfg.learning_rate,
        minibatch=batch_size,
        max_new_tokens=limits,
        stockfish_nodes=cfg.stockfish_nodes,
        engine_pool=pool,
        checkpoint_interval=cfg.checkpoint_interval,
        time_limit_s=cfg.time_limit_minutes * 60 if cfg.time_limit_minutes else None,
        threads=max(1, round(learner_cpus)),
        use_gpu=cfg.use_gpu,
        tracking_uri=context.tracking.uri,
        tracking_run_id=context.tracking.run_id,
    )


def run_grpo(context: PhaseContext) -> PhaseResult:
    """Check the inputs, plan the prompts, start the EnginePool, train, summarise."""
    from actors.engine_pool import EnginePool
    from cluster.runtime import release_actor_name

    cfg = context.config.grpo
    phase = context.phase_storage(output_name(context))
    found = check_grpo(context.config, Inputs.of_context(context), context.log)
    if cfg.use_gpu:  # the GPUs asked for are there, before anything starts or is written
        check_gpus("grpo", cfg.num_workers, log=context.log)
    assert found.facts is not None  # nothing is taken as given here
    prompts, heldout, drawn = plan_prompts(context, cfg)
    limits = max_new_tokens(cfg, found.facts["move_tokens"])
    phase.makedirs()
    starts = drawn.pop("starts")
    phase.write_text(
        "prompts.json", json.dumps({"prompts": prompts, "heldout": heldout, "drawn": drawn, "starts": starts})
    )
    engine_cpus, learner_cpus, batch_size = learner_resources(
        context, cfg, found.policy, prompts, limits, bool(found.facts.get("scorer"))
    )
    log_plan(context, found, drawn, learner_cpus)
    for i in range(cfg.engines):
        release_actor_name(f"{context.config.run.name}/engine-pool-{i}", None)
    pool = EnginePool.spread(
        cfg.engines, run=context.config.run.name, num_cpus_per_engine=engine_cpus, key="grpo.engines"
    )
    trainer = torch_trainer(
        context,
        "grpo",
        train_loop_per_worker,
        loop_config(context, found, limits, batch_size, pool, learner_cpus).train_loop_config(),
        num_workers=cfg.num_workers,
        cpus_per_worker=learner_cpus,
        use_gpu=cfg.use_gpu,
        folder=output_name(context),
        progress=(board := ProgressBoard(context.log, "iteration", cfg.iterations)),
    )
    started = time.perf_counter()
    try:
        with board:
            result = trainer.fit()
        seconds = time.perf_counter() - started
        scores, quality = heldout_results(context, found, heldout, limits, pool, seconds)
    finally:
        pool.shutdown()
    scorer = bool(found.facts.get("scorer"))
    return summarise(
        context, output_name(context), found.policy, result, seconds, drawn, scores, quality, scorer=scorer
    )


def heldout_results(
    context: PhaseContext,
    found: GRPOInputs,
    heldout: list[dict[str, Any]],
    limits: dict[str, int],
    pool: Any,
    seconds: float,
) -> tuple[dict[str, dict[str, float]], dict[str, Any]]:
    """The start and final policies on the held-out prompts (:func:`heldout_scores`) and their
    paired move quality on held-out positions (:func:`pipelines.learner.quality.heldout_quality`,
    the measure of every learner and of ``evaluate --mode paired``, Stockfish at the phase's
    nodes); empty without a final model."""
    from chessrl.engine.client import SearchLimit

    cfg = context.config.grpo
    phase = context.phase_storage(output_name(context))
    if not phase.exists("model/config.json"):
        return {}, {}
    final_path = model_location(None, phase.child("model"), output_name(context), "grpo")
    context.log(
        f"trained in {seconds:.0f} s; the start and final policies on {len(heldout)} held-out prompts"
    )
    engine = partial(engine_scores, pool, SearchLimit(nodes=cfg.stockfish_nodes), fresh=True)
    models = {"start": found.policy, "final": final_path}
    scores = heldout_scores(heldout, models, limits, engine, found.settings)
    quality = heldout_quality(
        context,
        models,
        cfg.text_format,
        games=cfg.games,
        positions=cfg.heldout_positions,
        nodes=cfg.stockfish_nodes,
    )
    return scores, quality


PHASE = Phase(
    name="grpo",
    section="grpo",
    section_model=GRPOConfig,
    run=run_grpo,
    check=check_grpo,
    folder=lambda c: grpo_folder(c.grpo.loss_type),
    summary=SUMMARY,
    description=DESCRIPTION,
)
main = PHASE.main
if __name__ == "__main__":
    sys.exit(main())
