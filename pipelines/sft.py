"""``sft``: fine-tune a GPT-2-style model on the games table with Ray Train + TRL's SFTTrainer.

    python -m pipelines.sft --config tiny
    chess-rl sft --model small --max-steps 5000 --use-gpu --num-workers 4 --storage s3://chess-runs

The games Parquet (``prepare``'s output) is read with Ray Data and split by ``game_id`` into
training games and held-out games. Training texts (whole games, so every move is a target) are
streamed to each Ray Train worker as its dataset shard, where TRL's SFTTrainer trains; every
``eval_every`` steps the worker measures the legal-move rate on held-out positions (argmax,
unmasked) and Ray Train keeps a checkpoint under ``<storage>/<run>/sft/ray``. Running the same
command again resumes from the last checkpoint. The final model is saved in Hugging Face format
at ``<storage>/<run>/sft/model`` (load it with ``AutoModelForCausalLM.from_pretrained``).
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from chessrl.lm.formats import MovesFormat
from chessrl.lm.lm_data import split_games
from chessrl.lm.lm_eval import HeldoutPosition, sample_positions, within_context
from cluster.errors import ConfigError, StorageError
from cluster.storage import Storage
from pipelines.cli import one_line
from pipelines.common.artifacts import mark_text_format, sft_folder
from pipelines.common.phase import Inputs, Phase, PhaseContext, PhaseResult, readable_model
from pipelines.config import ChessRLConfig, SftConfig
from pipelines.learner import check_gpus, final_metrics
from pipelines.learner import trl as trl_learner
from pipelines.learner.sft import SftLoopConfig, train_loop_per_worker
from pipelines.sft_data import POSITION_FORMATS, SftInputs, SftSplit, board_example_tokens, training_data

if TYPE_CHECKING:  # torch and transformers load where a run needs them, not for --help
    from chessrl.lm.legality import MoveTokens

SUMMARY = one_line("sft")
DESCRIPTION = (
    "Trains on whole games in the moves format, measures the legal-move rate on held-out positions,\n"
    "checkpoints under <storage>/<run>/sft/ray (a re-run resumes) and saves the model to\n"
    "<storage>/<run>/sft/model. Example:\n"
    "  chess-rl sft --model tiny --max-steps 500"
)


def legal_move_tokens(cfg: SftConfig, tokenizer: Any, log: Any) -> tuple[MoveTokens | None, float]:
    """The move tokens the legal-move loss needs, and its weight (0: off).

    ``legal_loss_weight`` null means 1.0 where the tokenizer has one token per UCI move, and off
    (said in the log) where it has not; a weight given for such a tokenizer is a ConfigError. The
    loss reads games in the moves format: with ``text_format: rookworld`` it is off, and a weight
    for it is a ConfigError.
    """
    from chessrl.lm.legality import MoveTokens

    if cfg.legal_loss_weight == 0:
        return None, 0.0
    if cfg.text_format != "moves":
        if cfg.legal_loss_weight is not None:
            raise ConfigError(
                f"sft.legal_loss_weight (--legal-loss-weight) is {cfg.legal_loss_weight}, but the legal-move "
                f"loss reads games in the moves format, not {cfg.text_format}: leave it unset or set it to 0"
            )
        log(f"legal-move loss off: it reads the moves format, not {cfg.text_format}")
        return None, 0.0
    try:
        moves = MoveTokens(tokenizer)
    except ValueError as err:
        if cfg.legal_loss_weight is None:
            log(f"legal-move loss off: {err}")
            return None, 0.0
        raise ConfigError(
            f"sft.legal_loss_weight (--legal-loss-weight) is {cfg.legal_loss_weight}, but {err} "
            f"({cfg.base_model}): leave it unset or set it to 0 for this model"
        ) from None
    return moves, 1.0 if cfg.legal_loss_weight is None else cfg.legal_loss_weight


def check_sft(config: ChessRLConfig, inputs: Inputs, log: Any = lambda line: None) -> SftInputs:
    """Every input of ``sft``, before Ray starts: the base model (a saved folder whose tokenizer
    loads), ``max_length`` against its context, the text format's options, the legal-move loss
    for its tokenizer, and the games table (``game_id``, ``moves``, ``result``, a game at least),
    unless an earlier phase of the same graph run writes it."""
    from chessrl.lm.checkpoints import ModelLoadError, load_tokenizer
    from chessrl.lm.models import context_length
    from chessrl.lm.tokenizer import build_chess_tokenizer
    from pipelines.common.artifacts import games_table

    cfg = config.sft
    if cfg.base_model:
        try:
            n_positions = context_length(None, cfg.base_model)
        except ModelLoadError as exc:
            raise ModelLoadError(f"sft.base_model (--base-model): {exc}") from None
        readable_model(cfg.base_model, "sft.base_model (--base-model)")
        tokenizer = load_tokenizer(cfg.base_model)
    else:
        tokenizer, n_positions = build_chess_tokenizer(), context_length(cfg.model)
    if cfg.max_length > n_positions:
        raise ConfigError(
            f"sft.max_length (--max-length) is {cfg.max_length}, but the model reads at most {n_positions} "
            f"tokens ({cfg.base_model or 'preset ' + cfg.model}): use {n_positions} or less"
        )
    if cfg.text_format in POSITION_FORMATS:  # facts: a lower bound; the data's longest is checked when packed
        longest = board_example_tokens(tokenizer, cfg.text_format)
        if cfg.max_length < longest:
            parts = "64 squares, side, castling, en passant, M:, the move"
            what = (
                f"takes up to {longest} tokens (<bos>, {parts}, <eos>)"
                if cfg.text_format == "board"
                else f"with every castling right and an en passant capture takes {longest} tokens (<bos>, {parts}, "
                "<eos>, with 64 control characters and the moves with facts before M:; ~140-300 in games, the "
                "data's longest checked once packed)"
            )
            raise ConfigError(
                f"sft.max_length (--max-length) is {cfg.max_length}, but one {cfg.text_format} example {what}: "
                f"use {longest} or more"
            )
    if cfg.text_format != "moves" and cfg.condition_on_result:
        raise ConfigError(
            "sft.condition_on_result (--condition-on-result) prefixes whole games with their result; "
            f"the {cfg.text_format} text format has no games, only positions: leave it false"
        )
    legal_moves, legal_weight = legal_move_tokens(cfg, tokenizer, log)
    annotations, move_tokens = check_annotations(cfg, tokenizer, inputs)
    source = Storage.from_uri(cfg.games or inputs.folder("prepare").uri_of("games"))
    if cfg.games or not inputs.will_write("prepare"):
        games_table(source, ("game_id", "moves", "result"))
    return SftInputs(tokenizer, n_positions, legal_moves, legal_weight, source, annotations, move_tokens)


def check_annotations(
    cfg: SftConfig, tokenizer: Any, inputs: Inputs
) -> tuple[list[Storage] | None, MoveTokens | None]:
    """With ``sft.annotations``: the board, facts or moves format, a tokenizer with one token per
    move (the soft target is over move tokens) and annotated tables (``train/`` shards with
    ``fen``, ``moves`` and ``expected``; ``cp`` for the margin soft_target_scale; ``history`` for
    the moves format) unless an earlier phase of the graph run writes them. Returns their train/
    folders and the move tokens (both None without annotations)."""
    import pyarrow.dataset as pads

    from chessrl.lm.legality import MoveTokens

    if not cfg.annotations:
        return None, None
    key = "sft.annotations (--annotations)"
    if cfg.text_format not in (*POSITION_FORMATS, "moves"):
        raise ConfigError(
            f"{key} trains on boards (--text-format board or facts) or on whole games (--text-format moves), "
            f"not {cfg.text_format}"
        )
    try:
        moves = MoveTokens(tokenizer)
    except ValueError as err:
        raise ConfigError(f"{key}: {err}") from None
    folders = [Storage.from_uri(uri).child("train") for uri in cfg.annotations]
    if inputs.will_write("annotate"):
        return folders, moves
    for train in folders:
        if not train.exists() or not [f for f in train.list_files() if f.endswith(".parquet")]:
            raise StorageError(f"{key}: no annotated positions at {train.uri}: run `chess-rl annotate` first")
        names = pads.dataset(train.path(), filesystem=train.fs, format="parquet").schema.names
        missing = [c for c in ("fen", "moves", "expected") if c not in names]
        if missing:
            raise StorageError(
                f"{key}: {train.uri} is not an annotated table: no column {', '.join(missing)}"
            )
        if cfg.soft_target_scale == "margin" and "cp" not in names:
            raise StorageError(
                f"{key}: {train.uri} has no cp column (each move's centipawns), which the margin "
                "soft_target_scale reads: annotate again, or pass --soft-target-scale expected"
            )
        if cfg.text_format == "moves" and "history" not in names:
            raise StorageError(
                f"{key}: {train.uri} has no history column (the moves before each position), which the moves "
                "format needs: annotate again with this version (--whole-games), or use --text-format board"
            )
    return folders, moves


def split_heldout(context: PhaseContext, found: SftInputs, folder: str) -> SftSplit:
    """The games of ``found`` split into training and held-out games, and the held-out positions
    sampled from the latter (in the moves format, each within the model's context with its
    answer), also written to ``<run>/<folder>/heldout.json`` for anyone who measures the saved
    model the same way (prompt = the moves before, optionally behind the prefix; the move the
    game played)."""
    import pyarrow.dataset as pads

    source, cfg = found.games, context.config.sft
    columns = ["game_id", "moves", "result"]
    table = pads.dataset(source.path(), filesystem=source.fs, format="parquet").to_table(columns=columns)
    train_rows, held_rows, duplicates = split_games(table.to_pylist(), cfg.heldout_fraction)
    if not train_rows or not held_rows:
        raise StorageError(
            f"{source.uri} has {table.num_rows} games: too few to split for training and held-out evaluation"
        )
    heldout = sample_positions(
        [(r["moves"], r["result"]) for r in held_rows],
        cfg.heldout_positions,
        seed=context.config.run.seed,
        condition_on_result=cfg.condition_on_result,
    )
    if cfg.text_format == "moves":  # a tokenizer that spells a move in pieces needs far more tokens a move
        from chessrl.lm.models import move_tokens, prompt_ids

        fmt, answer = MovesFormat(), move_tokens(found.tokenizer)

        def fits(p: HeldoutPosition) -> bool:
            prompt = fmt.prompt(p.moves_before, prefix=p.prefix)
            return len(prompt_ids(found.tokenizer, prompt)) + answer <= found.n_positions

        heldout = within_context(heldout, fits)
    context.phase_storage(folder).write_text(
        "heldout.json",
        json.dumps(
            [
                {"moves_before": list(p.moves_before), "next_move": p.next_move, "prefix": p.prefix}
                for p in heldout
            ]
        ),
    )
    return SftSplit(train_rows, held_rows, duplicates, heldout)


def summary_lines(summary: dict[str, Any], seconds: float, num_workers: int) -> list[str]:
    """The phase's closing lines."""
    legal_weight = summary["legal_loss_weight"]
    return [
        "sft summary",
        (
            f"  positions     {summary['annotated_positions']:,} annotated (distilled), "
            f"{summary['heldout_games']:,} held-out games"
            if summary.get("annotated_positions")
            else f"  games         {summary['train_games']:,} training, {summary['heldout_games']:,} held out"
        ),
        trl_learner.steps_line(summary, seconds, f"loss {float(summary['loss'] or 'nan'):.3f}"),
        f"  held-out      legal-move rate {float(summary['heldout_legal_rate'] or 0):.1%}, "
        f"top-1 agreement {float(summary['heldout_top1_agreement'] or 0):.1%} "
        f"on {summary['heldout_positions']} positions (argmax, unmasked)",
        *(
            [
                f"  legal loss    weight {legal_weight:g}: legal moves get {float(summary['legal_mass'] or 0):.1%} "
                "of the probability on the last logged step (training blocks)"
            ]
            if legal_weight
            else []
        ),
        f"  throughput    {float(summary['train_tokens_per_s'] or 0):,.0f} tokens/s per worker "
        f"({num_workers} worker(s), padding included; {summary['tokens_per_epoch']:,} game tokens per epoch, "
        f"{summary['padding_fraction']:.1%} padding)",
        f"  model         {summary['model']}",
    ]


def loop_config(context: PhaseContext, found: SftInputs, split: SftSplit, batch_size: int) -> SftLoopConfig:
    """The learner loop's config (:func:`pipelines.learner.sft.train_loop_per_worker` reads it as
    attributes): the section's settings, ``batch_size`` (``auto`` resolved), the legal-move loss
    and soft targets of ``found``, the held-out positions of ``split``."""
    cfg = context.config.sft
    return SftLoopConfig.from_section(
        context,
        cfg,
        model=cfg.model,
        base_model=cfg.base_model,
        batch_size=batch_size,
        max_length=cfg.max_length,
        gradient_checkpointing=cfg.gradient_checkpointing,
        torch_compile=cfg.torch_compile,
        dropout=cfg.dropout,
        legal_loss_weight=found.legal_weight,
        soft_targets=found.annotations is not None,
        text_format=cfg.text_format,
        heldout=list(split.heldout),
    )


def run_sft(context: PhaseContext) -> PhaseResult:
    """Check the inputs, split the games, tokenise and pack the training texts in Ray Data, train
    in Ray Train, export the model (with its text format), summarise."""
    cfg = context.config.sft
    log = context.log
    folder = sft_folder(cfg.text_format)
    found = check_sft(context.config, Inputs.of_context(context), log)
    if cfg.use_gpu:  # before the data pass and the batch-size probe, which would wait for one
        check_gpus("sft", cfg.num_workers)
    split = split_heldout(context, found, folder)
    dataset, blocks, game_tokens, truncated, positions = training_data(
        cfg, found, split, context.config.run.seed, log
    )
    cpus_per_worker = trl_learner.learner_cpus(cfg)
    batch_size = cfg.batch_size
    if batch_size == "auto":
        from pipelines.common.batch_size import auto_batch_size

        batch_size = auto_batch_size(
            cfg.base_model or f"preset:{cfg.model}",
            cfg.max_length,
            log=log,
            use_gpu=cfg.use_gpu,
            share=cfg.auto_batch_memory_share,
            cpus=cpus_per_worker,
        )
    log(
        f"{blocks:,} blocks of {cfg.max_length} tokens: {game_tokens:,} game tokens per epoch, "
        f"{1 - game_tokens / (blocks * cfg.max_length):.1%} padding"
        + (f", {truncated:,} games longer than a block cut to its length" if truncated else "")
        + f"; {trl_learner.workers_text(cfg, cpus_per_worker)}"
    )
    config = loop_config(context, found, split, batch_size)
    result, seconds = trl_learner.fit_learner(
        context, "sft", cfg, train_loop_per_worker, config, dataset, cpus_per_worker, folder=folder
    )
    model_out = trl_learner.export_model(
        context, folder, result, edit=lambda path: mark_text_format(path, cfg.text_format)
    )
    metrics = final_metrics(result)
    context.tracking.log_metrics(metrics)
    summary = trl_learner.learner_summary(
        {
            "phase": "sft",
            "games": found.games.uri,
            "train_games": len(split.train_rows),
            "heldout_games": len(split.held_rows),
            "duplicate_games": split.duplicates,
            "annotated_positions": positions if found.annotations is not None else None,
            "heldout_positions": len(split.heldout),
            "batch_size": batch_size,
        },
        metrics,
        {
            "train_tokens_per_s": metrics.get("train_tokens_per_s"),
            "tokens_per_epoch": game_tokens,
            "padding_fraction": round(1 - game_tokens / (blocks * cfg.max_length), 4),
            "truncated_games": truncated,
            "legal_loss_weight": found.legal_weight,
            **{k: metrics.get(k) for k in ("legal_mass", "heldout_legal_rate", "heldout_top1_agreement")},
        },
        model_out,
        seconds,
    )
    trl_learner.write_summary(context, folder, summary)
    return PhaseResult(summary=summary, lines=summary_lines(summary, seconds, cfg.num_workers), ok=True)


PHASE = Phase(
    name="sft",
    section="sft",
    section_model=SftConfig,
    run=run_sft,
    check=check_sft,
    folder=lambda c: sft_folder(c.sft.text_format),
    summary=SUMMARY,
    description=DESCRIPTION,
)
main = PHASE.main
if __name__ == "__main__":
    sys.exit(main())
