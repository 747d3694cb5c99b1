"""``reward``: preference pairs -> a reward model, with TRL's RewardTrainer inside Ray Train.

    python -m pipelines.reward --config tiny
    chess-rl reward --max-steps 1000 --num-workers 2 --eval-every 100
    chess-rl reward --preferences s3://bucket/runs/demo/preferences --base-model s3://bucket/models/sft
    chess-rl reward --source annotate --model tiny --text-format facts --learning-rate 1e-3

The model is ``GPT2ForSequenceClassification`` with one label: the transformer of the SFT model
(or ``--base-model``, any GPT-2-style checkpoint; or ``--model``, a fresh preset) under a new
score head. Its inputs are checked by :mod:`pipelines.reward_inputs`. Pairs are read from
the preference Parquet with Ray Data and tokenized there, ``<bos> prompt + move <eos>`` (the ids
TRL's trainer expects, built by :func:`chessrl.rl.reward.text_ids`, the same ids the RewardServer
scores), and each Ray Train worker streams its own shard, with equal rows per worker so no
worker waits on another. Every ``eval_every`` steps rank 0 measures, on held-out data:

- the pairwise accuracy on the held-out pairs (all of them, and the pairs of two legal moves
  alone, kinds "worse", "ranked" and "random": harder than an illegal move);
- the Spearman correlation, per held-out position, between the model's score of every legal
  move and Stockfish's score of it (positions scored once at ``spearman_nodes``, kept in
  ``<storage>/<run>/reward/spearman_positions.json``), averaged over the positions;

and a checkpoint is kept under ``<storage>/<run>/reward/ray`` (the same command resumes there).
The final model, at ``<storage>/<run>/reward/model``, loads with
``AutoModelForSequenceClassification``; its config carries ``chessrl_reward_mean`` and
``chessrl_reward_std`` (scores of ``normalize_pairs`` training pairs, chosen and rejected) that
:class:`chessrl.rl.reward.Normalizer` applies for PPO.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from chessrl.lm.formats import get_format
from chessrl.rl.preferences import LEGAL_KINDS, mover_cp_after
from chessrl.rl.reward import (
    JUDGE_KEYS,
    TEXT_FORMAT_KEY,
    heldout_board,
    judge_line,
    pair_texts,
    query_ids,
    reward_format,
    text_ids,
)
from cluster.storage import Storage
from pipelines.cli import one_line
from pipelines.common.artifacts import read_heldout
from pipelines.common.phase import Inputs, Phase, PhaseContext, PhaseResult
from pipelines.config import RewardConfig
from pipelines.learner import final_metrics, read_checkpoint
from pipelines.learner import trl as trl_learner
from pipelines.learner.reward_model import reward_model_from_backbone
from pipelines.reward_inputs import check_reward, fresh_backbone

SUMMARY = one_line("reward")
DESCRIPTION = (
    "GPT2ForSequenceClassification on the sft model's transformer (or --base-model, or a fresh --model),\n"
    "trained on chosen/rejected pairs (this run's preferences, or annotate's with --source annotate);\n"
    "held-out pairwise accuracy and Spearman correlation with Stockfish every\n"
    "eval_every steps; checkpoints under <storage>/<run>/reward/ray (a re-run resumes); the model\n"
    "at <storage>/<run>/reward/model, with the reward mean and std in its config. Example:\n"
    "  chess-rl reward --max-steps 300 --num-workers 2"
)


#: The columns of a tokenized pair, as TRL's RewardTrainer reads them.
PAIR_COLUMNS: tuple[str, ...] = ("chosen_ids", "rejected_ids")


@dataclass(frozen=True, kw_only=True)
class RewardLoopConfig(trl_learner.PairsLoopConfig):
    """What the reward learner's workers read beside
    :class:`~pipelines.learner.trl.PairsLoopConfig`'s fields, built by the driver
    (:func:`loop_config`), frozen: the workers read it as attributes."""

    base_model: str
    """The backbone whose transformer the reward model starts from."""
    center_rewards_coefficient: float | None
    """RewardTrainer's pull of the rewards towards 0 (None: none)."""
    spearman: list[dict[str, Any]]
    """The held-out positions whose legal moves' scores rank 0 compares with Stockfish's."""
    normalize_sample: list[dict[str, Any]]
    """The training pairs whose scores at the last step give the normalisation's mean and std."""
    text_format: str
    """What the judge reads; kept in the model's config, so every checkpoint says it too."""


def train_loop_per_worker(loop_config: dict[str, Any]) -> None:
    """Runs in every Ray Train worker: the RM from the backbone, TRL's RewardTrainer on this
    worker's stream of pairs, held-out evaluation on rank 0, checkpoints through Ray Train.
    ``loop_config`` is Ray Train's: a :class:`RewardLoopConfig` under ``config``."""
    import ray.train
    from trl import RewardConfig as TrlRewardConfig
    from trl import RewardTrainer

    class ShardRewardTrainer(trl_learner.OwnShardLoader, RewardTrainer):  # type: ignore[misc]
        """TRL's RewardTrainer reading this worker's own shard as is."""

    cfg = RewardLoopConfig.of(loop_config)
    model, tokenizer = reward_model_from_backbone(cfg.base_model)
    # in every checkpoint, not only the export: a checkpoint read as a judge must read its format
    setattr(model.config, TEXT_FORMAT_KEY, cfg.text_format)
    setup = trl_learner.worker_setup(cfg)
    rows = trl_learner.ShardRows(ray.train.get_dataset_shard("train"), cfg.seed, PAIR_COLUMNS)
    args = trl_learner.training_arguments(
        TrlRewardConfig,
        cfg,
        "reward",
        setup,
        weight_decay=cfg.weight_decay,
        center_rewards_coefficient=cfg.center_rewards_coefficient,
        max_length=None,  # too-long pairs were dropped (and counted) before the split
        logging_steps=trl_learner.logging_divisor(cfg.eval_every),  # a loss logged at each evaluation's step
        activation_checkpointing=False,  # (gradient_checkpointing: a deprecated alias that warns)
    )
    train = trl_learner.stream_dataset(rows, PAIR_COLUMNS)
    trainer = ShardRewardTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer)
    trl_learner.train_with_trl(trainer, "reward", cfg, setup, RewardEval(cfg, setup, tokenizer.pad_token_id))


class RewardEval(trl_learner.PairsEval):
    """Held-out pairwise accuracy and Spearman every ``eval_every`` steps (rank 0), into the
    trainer's log history (Ray Train's reported metrics), MLflow and one progress line: the
    loss, with the held-out figures at an evaluation's step."""

    def __init__(self, cfg: RewardLoopConfig, setup: trl_learner.WorkerSetup, pad_token_id: int) -> None:
        super().__init__(cfg, setup)
        self.cfg: RewardLoopConfig = cfg
        self.pad_token_id = pad_token_id

    def measure(self, model: Any) -> dict[str, float]:
        from chessrl.rl.reward import evaluate_reward_model

        cfg = self.cfg
        return evaluate_reward_model(model, cfg.heldout, cfg.spearman, self.pad_token_id, LEGAL_KINDS)

    def final_measures(self, model: Any) -> dict[str, float]:
        """The final model's score mean and std on the normalisation's training pairs (chosen and
        rejected), measured here where the model is loaded rather than by a task that loads it again."""
        return normalizer_scores(model, self.cfg.normalize_sample, self.pad_token_id)

    def figures(self, logs: dict[str, Any], metrics: dict[str, float]) -> list[str]:
        figures = [f"loss {float(logs['loss']):.3f}"] if "loss" in logs else []
        for key, text in (
            ("heldout_accuracy", "held-out accuracy {:.1%}"),
            ("heldout_accuracy_legal", "on legal moves {:.1%}"),
            ("heldout_spearman", "Spearman {:.3f}"),
        ):
            if key in metrics:
                figures.append(text.format(metrics[key]))
        return figures


def pair_ids(tokenizer: Any, text_format: str, row: dict[str, Any]) -> tuple[list[int], list[int]] | None:
    """A preference row's ``chosen_ids`` / ``rejected_ids`` in the reward model's text format
    (:func:`chessrl.rl.reward.pair_texts`, then :func:`chessrl.rl.reward.text_ids`); None when the
    format needs a position the row cannot rebuild."""
    texts = pair_texts(
        get_format(text_format),
        str(row["prompt"]),
        row.get("fen") or None,
        str(row["chosen"]),
        str(row["rejected"]),
    )
    if texts is None:
        return None
    return text_ids(tokenizer, texts[0]), text_ids(tokenizer, texts[1])


def tokenize_pairs(
    batch: dict[str, Any], tokenizer: Any, max_length: int, holdout: bool, text_format: str = "moves"
) -> dict[str, Any]:
    """Ray Data stage: pairs -> ``chosen_ids`` / ``rejected_ids`` in ``text_format`` (:func:`pair_ids`),
    whether the pair fits ``max_length`` and its position could be rebuilt (``fits``), whether it is held out (``held``: in a table
    with no train/held-out split, one board in twenty by :func:`chessrl.rl.reward.heldout_board`), and
    its ``kind`` ("worse" where the table has none)."""
    import numpy as np

    prompts, chosen, rejected = batch["prompt"], batch["chosen"], batch["rejected"]
    fens = batch["fen"] if "fen" in batch else [None] * len(prompts)
    kinds = [str(k) for k in batch["kind"]] if "kind" in batch else ["worse"] * len(prompts)
    out_c, out_r, fits, held = [], [], [], []
    for prompt, c, r, fen in zip(prompts, chosen, rejected, fens, strict=True):
        ids = pair_ids(tokenizer, text_format, {"prompt": prompt, "chosen": c, "rejected": r, "fen": fen})
        c_ids, r_ids = ids or ([], [])
        out_c.append(np.asarray(c_ids, dtype=np.int32))
        out_r.append(np.asarray(r_ids, dtype=np.int32))
        fits.append(ids is not None and max(len(c_ids), len(r_ids)) <= max_length)
        held.append(bool(holdout and heldout_board(str(fen) if fen else str(prompt))))
    objects = []
    for values in (out_c, out_r):
        array = np.empty(len(values), dtype=object)
        array[:] = values
        objects.append(array)
    return {
        "chosen_ids": objects[0],
        "rejected_ids": objects[1],
        "fits": np.asarray(fits),
        "held": np.asarray(held),
        "kind": np.asarray(kinds, dtype=object),
    }


def spearman_positions(
    context: PhaseContext, pairs: Sequence[dict[str, Any]], tokenizer: Any, text_format: str = "moves"
) -> list[dict[str, Any]]:
    """Held-out positions with Stockfish's score (mover's view, centipawns, mates capped) of every
    legal move at ``spearman_nodes``; computed once (EnginePool) and kept under the phase's
    storage, then turned into the ids the model scores."""
    import chess

    from chessrl.engine.client import SearchLimit

    cfg = context.config.reward
    out = context.phase_storage("reward")
    from chessrl.rl.dpo import position_of

    boards: dict[str, tuple[str, list[str] | None]] = {}
    for pair in pairs:
        found = position_of(str(pair["prompt"]), pair.get("fen") or None)
        if found is None or (found[1] is None and text_format == "moves"):
            continue  # no legal position, or one a moves-format judge cannot be asked about
        board, moves = found
        if len(list(board.legal_moves)) >= 2:
            boards.setdefault(" ".join(board.fen().split()[:4]), (board.fen(), moves))
        if len(boards) >= cfg.spearman_positions:
            break
    key = {"nodes": cfg.spearman_nodes, "fens": sorted(fen for fen, _ in boards.values())}
    cached = (
        json.loads(out.read_text("spearman_positions.json")) if out.exists("spearman_positions.json") else {}
    )
    if cached.get("key") != key:
        from actors.engine_pool import EnginePool

        children, owners = [], []
        for fen, _moves in boards.values():
            board = chess.Board(fen)
            for move in sorted(m.uci() for m in board.legal_moves):
                after = board.copy(stack=False)
                after.push_uci(move)
                children.append(after.fen())
                owners.append((fen, move))
        context.log(
            f"Stockfish scores every legal move of {len(boards)} held-out positions "
            f"({len(children):,} moves at {cfg.spearman_nodes:,} nodes), once, for the Spearman correlation"
        )
        from cluster.capacity import sizing_cpus

        engines = sizing_cpus()[0]  # one a CPU of the nodes alive, or of the first node an autoscaler starts
        pool = EnginePool.spread(
            engines, run=f"{context.config.run.name}-reward", num_cpus_per_engine=0.5, log=context.log
        )
        try:
            scored = pool.analyse(children, SearchLimit(nodes=cfg.spearman_nodes), fresh=True)
        finally:
            pool.shutdown()
        moves_of = dict(boards.values())
        positions: dict[str, dict[str, Any]] = {}
        for (fen, move), analysis in zip(owners, scored, strict=True):
            entry = positions.setdefault(fen, {"fen": fen, "moves": moves_of[fen], "scores": {}})
            entry["scores"][move] = mover_cp_after(analysis.score)
        cached = {"key": key, "positions": list(positions.values())}
        out.write_text("spearman_positions.json", json.dumps(cached))
    from chessrl.rl.reward import RewardQuery

    fmt = get_format(text_format)
    return [
        {
            "ids": [
                query_ids(
                    tokenizer,
                    RewardQuery(tuple(p["moves"]), move)
                    if p["moves"] is not None
                    else RewardQuery((), move, p["fen"]),
                    fmt,
                )
                for move in p["scores"]
            ],
            "cp": list(p["scores"].values()),
        }
        for p in cached["positions"]
    ]


def normalizer_scores(model: Any, sample: list[dict[str, Any]], pad_id: int) -> dict[str, float]:
    """``reward_mean`` and ``reward_std`` of ``model``'s scores on training pairs (chosen and
    rejected), the model put in eval mode for the call."""
    import statistics

    from chessrl.rl.reward import score_ids

    was_training = model.training
    model.eval()
    try:
        scores = score_ids(
            model, [p["chosen_ids"] for p in sample] + [p["rejected_ids"] for p in sample], pad_id
        )
    finally:
        model.train(was_training)
    return {
        "reward_mean": statistics.fmean(scores),
        "reward_std": statistics.pstdev(scores) if len(scores) > 1 else 1.0,
    }


def normalizer_stats(checkpoint: Any, sample: list[dict[str, Any]], name: str) -> tuple[float, float]:
    """Ray task: :func:`normalizer_scores` of the saved model (when the learner's final report
    lacks them: a run resumed from its last step's checkpoint)."""
    with read_checkpoint(checkpoint) as folder:
        model, tokenizer = reward_model_from_backbone(str(Path(folder) / name))
    stats = normalizer_scores(model, sample, tokenizer.pad_token_id)
    return stats["reward_mean"], stats["reward_std"]


@dataclass(frozen=True)
class RewardData:
    """What the reward learner trains and measures on: the training pairs (a materialized Ray
    dataset of token ids, ``train_pairs`` of them; ``too_long`` more left out), the held-out
    pairs, the Spearman positions and the training pairs the normalisation scores."""

    source: Storage
    train: Any
    train_pairs: int
    too_long: int
    held_rows: list[dict[str, Any]]
    spearman: list[dict[str, Any]]
    sample: list[dict[str, Any]]
    text_format: str = "moves"
    """What the judge reads (:func:`reward_data`'s ``text_format``)."""


def reward_data(
    context: PhaseContext,
    preferences: tuple[Storage, list[str], list[str], set[str]],
    tokenizer: Any,
    max_length: int,
    text_format: str,
) -> RewardData:
    """The preference pairs tokenized in Ray Data in the judge's ``text_format``: those that fit
    the model's context for training, the held-out ones (the table's held-out files, else its
    held-out boards), the Spearman positions and the sample for the normalisation."""
    cfg = context.config.reward
    source, train_files, held_files, present = preferences
    trl_learner.configure_ray_data()
    # tokenize in Ray Data, then keep what fits the model's context
    split_by_board = not held_files
    stage = {
        "tokenizer": tokenizer,
        "max_length": max_length,
        "holdout": split_by_board,
        "text_format": text_format,
    }
    _, total, fitting = trl_learner.tokenized_pairs(
        source, train_files, present, tokenize_pairs, stage, "fits"
    )
    held_pairs: list[dict[str, Any]] = []
    if split_by_board:
        train, held_rows = trl_learner.board_split(fitting, cfg.heldout_pairs, PAIR_COLUMNS, more=("kind",))
    else:
        train = fitting
        held_pairs = read_heldout(source, held_files, cfg.heldout_pairs, context.config.run.seed)
        held_rows = [
            {"chosen_ids": ids[0], "rejected_ids": ids[1], "kind": str(p.get("kind") or "worse")}
            for p in held_pairs
            if (ids := pair_ids(tokenizer, text_format, p)) is not None
        ]
        held_rows = [r for r in held_rows if max(len(r["chosen_ids"]), len(r["rejected_ids"])) <= max_length]
    train, train_pairs = trl_learner.training_pairs(
        train, PAIR_COLUMNS, source, cfg, "reward", "that fit the model"
    )
    too_long = total - fitting.count()
    spearman = (
        spearman_positions(context, held_pairs, tokenizer, text_format)
        if held_pairs and cfg.spearman_positions
        else []
    )
    sample = [{k: list(r[k]) for k in PAIR_COLUMNS} for r in train.take(cfg.normalize_pairs)]
    return RewardData(source, train, train_pairs, too_long, held_rows, spearman, sample, text_format)


def add_normalizer(folder: Path, mean: float, std: float, text_format: str) -> None:
    """The reward's mean and std, and the text format it reads (the RewardServer asks in it),
    into the exported model's ``config.json``."""
    config = json.loads((folder / "config.json").read_text())
    config.update(chessrl_reward_mean=mean, chessrl_reward_std=std)
    config[TEXT_FORMAT_KEY] = text_format
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))


def summary_lines(summary: dict[str, Any], seconds: float) -> list[str]:
    """The phase's closing lines: the pairs, the steps in ``seconds``, the held-out accuracies
    and Spearman correlation, the normalisation, the throughput and the model."""
    pct = partial(trl_learner.percent, summary)
    return [
        "reward summary",
        f"  pairs         {summary['train_pairs']:,} training, {summary['heldout_pairs']:,} held out, read as "
        f"{summary['text_format']} text"
        + (
            f" ({summary['too_long_pairs']:,} too long or without a position, left out)"
            if summary["too_long_pairs"]
            else ""
        ),
        trl_learner.steps_line(
            summary,
            seconds,
            f"loss {float(summary['loss'] or 'nan'):.3f}, training accuracy {pct('train_accuracy')}",
        ),
        f"  held-out      pairwise accuracy {pct('heldout_accuracy')} "
        f"(on pairs of legal moves {pct('heldout_accuracy_legal')}; Stockfish's move above a random "
        f"legal one {pct('heldout_accuracy_random')}); "
        + (
            f"Spearman {float(summary['heldout_spearman']):.3f} with Stockfish over the legal moves of "
            f"{summary['spearman_positions']} positions"
            if summary["heldout_spearman"] is not None
            else "no Spearman (no held-out positions)"
        ),
        judge_line(summary),
        f"  normalisation reward mean {summary['reward_mean']:.3f}, std {summary['reward_std']:.3f} (saved in the model's config)",
        f"  throughput    {float(summary['train_pairs_per_s'] or 0):,.0f} pairs/s",
        f"  model         {summary['model']}",
    ]


def loop_config(context: PhaseContext, base: str, data: RewardData) -> RewardLoopConfig:
    """The learner loop's config (:func:`train_loop_per_worker` reads it as attributes): the
    section's settings, the backbone ``base``, and the held-out pairs, Spearman positions and
    normalisation sample of ``data``."""
    cfg = context.config.reward
    return RewardLoopConfig.from_section(
        context,
        cfg,
        base_model=base,
        weight_decay=cfg.weight_decay,
        center_rewards_coefficient=cfg.center_rewards_coefficient,
        world_size=cfg.num_workers,
        heldout=data.held_rows,
        spearman=data.spearman,
        normalize_sample=data.sample,
        text_format=data.text_format,
    )


def run_reward(context: PhaseContext) -> PhaseResult:
    """Check the inputs, tokenize the pairs (:func:`reward_data`), train in Ray Train, score the
    training sample for the normalisation, export the model with it, summarise."""
    import ray
    from ray.train.huggingface.transformers import RayTrainReportCallback

    from chessrl.lm.checkpoints import load_tokenizer
    from chessrl.lm.models import context_length

    cfg = context.config.reward
    found = check_reward(context.config, Inputs.of_context(context))
    base, base_config = fresh_backbone(context) if cfg.model else (found.base, found.base_config)
    assert base_config is not None and found.preferences is not None  # nothing is taken as given here
    tokenizer = load_tokenizer(base)
    max_length = context_length(None, base)
    # what the judge reads: the configured format, else the backbone's own
    text_format = cfg.text_format or reward_format(base_config).name
    data = reward_data(context, found.preferences, tokenizer, max_length, text_format)
    cpus_per_worker = trl_learner.learner_cpus(cfg)
    context.log(
        f"{data.train_pairs:,} training pairs, {len(data.held_rows):,} held-out pairs and {len(data.spearman)} "
        f"held-out positions for the rank correlation, from {data.source.uri}"
        + (
            f" ({data.too_long:,} pairs longer than the model's {max_length} tokens left out)"
            if data.too_long
            else ""
        )
        + f"; backbone {base}, reading the {text_format} text; {trl_learner.workers_text(cfg, cpus_per_worker)}"
    )
    config = loop_config(context, base, data)
    result, seconds = trl_learner.fit_learner(
        context, "reward", cfg, train_loop_per_worker, config, data.train, cpus_per_worker
    )
    context.log(f"trained in {seconds:.0f} s")
    reported = result.metrics or {}
    if "reward_mean" in reported and "reward_std" in reported:  # measured by the learner at its last step
        mean, std = float(reported["reward_mean"]), float(reported["reward_std"])
    else:
        context.log(
            f"scoring {len(data.sample):,} training pairs for the reward's mean and std (its normalisation)"
        )
        name = RayTrainReportCallback.CHECKPOINT_NAME
        mean, std = ray.get(
            ray.remote(num_cpus=1)(normalizer_stats).remote(result.checkpoint, data.sample, name)
        )
    model_out = trl_learner.export_model(
        context, "reward", result, lambda folder: add_normalizer(folder, mean, std, text_format)
    )
    metrics = final_metrics(result)
    context.tracking.log_metrics({**metrics, "reward_mean": mean, "reward_std": std})
    summary = trl_learner.learner_summary(
        {
            "phase": "reward",
            "preferences": data.source.uri,
            "base_model": base,
            "text_format": text_format,
            "train_pairs": data.train_pairs,
            "heldout_pairs": len(data.held_rows),
            "too_long_pairs": data.too_long,
            "spearman_positions": len(data.spearman),
        },
        metrics,
        {
            "train_accuracy": metrics.get("accuracy"),
            **{
                k: metrics.get(k)
                for k in ("heldout_accuracy", "heldout_accuracy_legal", "heldout_accuracy_random")
            },
            "heldout_spearman": metrics.get("heldout_spearman"),
            **{k: metrics.get(k) for k in JUDGE_KEYS},
            "train_pairs_per_s": metrics.get("train_pairs_per_s"),
            "reward_mean": mean,
            "reward_std": std,
        },
        model_out,
        seconds,
    )
    trl_learner.write_summary(context, "reward", summary)
    return PhaseResult(summary=summary, lines=summary_lines(summary, seconds), ok=True)


PHASE = Phase(
    name="reward",
    section="reward",
    section_model=RewardConfig,
    run=run_reward,
    check=check_reward,
    folder="reward",
    summary=SUMMARY,
    description=DESCRIPTION,
)
main = PHASE.main
if __name__ == "__main__":
    sys.exit(main())
