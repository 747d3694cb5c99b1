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
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from chessrl.lm.formats import BoardFormat
from chessrl.lm.legality import MoveTokens, legal_move_targets
from chessrl.lm.lm_data import pack_games, rookworld_texts, split_games, training_text
from chessrl.lm.lm_eval import sample_positions
from chessrl.lm.models import ModelLoadError, context_length, load_tokenizer, local_checkpoint
from chessrl.lm.tokenizer import build_chess_tokenizer
from cluster.errors import ConfigError, StorageError
from cluster.progress import ProgressBoard
from cluster.storage import Storage
from pipelines.artifacts import mark_text_format, sft_folder
from pipelines.config import ChessRLConfig, SftConfig
from pipelines.learner import (
    default_cpus_per_worker,
    export_hf_checkpoint,
    resume_folder,
    torch_trainer,
    training_finished,
)
from pipelines.phase import Inputs, Phase, PhaseContext, PhaseResult

SUMMARY = "sft: games Parquet -> a GPT-2-style chess policy (Ray Train TorchTrainer + TRL SFTTrainer)."
DESCRIPTION = (
    "Trains on whole games in the moves format, measures the legal-move rate on held-out positions,\n"
    "checkpoints under <storage>/<run>/sft/ray (a re-run resumes) and saves the model to\n"
    "<storage>/<run>/sft/model. Example:\n"
    "  chess-rl sft --model tiny --max-steps 500"
)


def train_loop_per_worker(cfg: dict[str, Any]) -> None:
    """Runs in every Ray Train worker: build or load the model, train with TRL, report to Ray."""
    import datasets
    import numpy as np
    import ray.train
    import torch
    from datasets.iterable_dataset import ExamplesIterable
    from ray.train.huggingface.transformers import RayTrainReportCallback, prepare_trainer
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import SFTConfig, SFTTrainer

    from chessrl.lm.lm_eval import HeldoutPosition, evaluate_moves
    from chessrl.lm.models import build_model, load_pretrained, resolve_bf16, resolve_compile, set_dropout
    from cluster.progress import report_progress
    from cluster.tracking import RunMetricsLogger

    progress = cfg["progress"]
    if cfg["base_model"]:
        model, tokenizer = load_pretrained(cfg["base_model"])
    else:
        model, tokenizer = build_model(cfg["model"])
    if cfg["dropout"] is not None:
        set_dropout(model, cfg["dropout"])
    legal_weight = float(cfg["legal_loss_weight"])
    heldout = [HeldoutPosition(tuple(p[0]), p[1], p[2]) for p in cfg["heldout"]]
    shard = ray.train.get_dataset_shard("train")
    rank = ray.train.get_context().get_world_rank()
    mlflow = RunMetricsLogger(cfg["tracking_uri"], cfg["tracking_run_id"]) if rank == 0 else None

    def blocks() -> Any:
        # cycle over the shard: max_steps, not epochs, decides when training ends; the blocks
        # were tokenised and packed in Ray Data, and each pass reshuffles them locally
        epoch = 0
        while True:
            for batch in shard.iter_batches(
                batch_size=256,
                batch_format="numpy",
                local_shuffle_buffer_size=4096,
                local_shuffle_seed=cfg["seed"] + epoch,
            ):
                for i, (row, length) in enumerate(zip(batch["input_ids"], batch["length"], strict=True)):
                    # a fixed shape (no recompiles); the padding after the last game is not a target
                    ids = row.tolist()
                    keep = np.arange(len(ids)) < length
                    if "targets" in batch:  # answer-only: the board's squares are read, not learnt
                        keep &= batch["targets"][i].astype(bool)
                    labels = np.where(keep, row, -100).tolist()
                    example = {"input_ids": ids, "labels": labels}
                    if legal_weight:
                        example["legal_moves"] = batch["legal_moves"][i]
                        example["legal_counts"] = batch["legal_counts"][i]
                    yield example
            epoch += 1

    def keyed() -> Any:
        yield from enumerate(blocks())

    # ExamplesIterable, not IterableDataset.from_generator: that one fingerprints the generator
    # with dill, which disassembles the closure (the Ray shard included) into the worker's log
    train = datasets.IterableDataset(ExamplesIterable(keyed, {}))

    tokens_per_step = cfg["batch_size"] * cfg["max_length"]

    class HeldoutEval(TrainerCallback):  # type: ignore[misc]
        """Tokens/s with the loss; legal-move rate and top-1 agreement on held-out positions;
        everything also to the phase's MLflow run (rank 0).

        ``train_tokens_per_s`` is this worker's steady rate: tokens of steps 2..N over their wall
        time, held-out evaluations excluded (checkpoint saves included)."""

        def __init__(self) -> None:
            self.tokens_seen = 0.0
            self.clock = time.perf_counter()
            self.mark: float | None = None
            self.train_time, self.steps_timed = 0.0, 0
            self.start_step, self.figures = 0, ""

        def on_log(
            self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any
        ) -> None:
            if not logs:
                return
            if "num_tokens" in logs:
                now = time.perf_counter()
                logs["tokens_per_s"] = (logs["num_tokens"] - self.tokens_seen) / max(1e-9, now - self.clock)
                self.tokens_seen, self.clock = logs["num_tokens"], now
            if mlflow is not None:
                mlflow.log(logs, step=state.global_step)
            if "loss" in logs and rank == 0:
                self.figures = f"loss {float(logs['loss']):.3f}" + (
                    f", {logs['tokens_per_s']:,.0f} tokens/s" if "tokens_per_s" in logs else ""
                )
                report_progress(progress, state.global_step, self.figures, start=self.start_step)

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            # 0 for a fresh run; the checkpoint's step when a re-run resumed (restored state)
            state.log_history.append({"resumed_from_step": state.global_step})
            self.start_step = state.global_step

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            now = time.perf_counter()
            if self.mark is not None:
                self.train_time += now - self.mark
                self.steps_timed += 1
            if state.global_step % cfg["eval_every"] == 0 or state.global_step >= state.max_steps:
                metrics = {
                    f"heldout_{k}": v
                    for k, v in evaluate_moves(
                        kw["model"], tokenizer, heldout, text_format=cfg["text_format"]
                    ).items()
                }
                metrics["heldout_eval_s"] = time.perf_counter() - now
                if self.steps_timed:
                    metrics["train_tokens_per_s"] = self.steps_timed * tokens_per_step / self.train_time
                state.log_history.append({**metrics, "step": state.global_step})
                if mlflow is not None:
                    mlflow.log(metrics, step=state.global_step)
                if rank == 0:
                    report_progress(
                        progress, state.global_step,
                        ", ".join(filter(None, (self.figures, f"held-out legal {metrics['heldout_legal_rate']:.1%}",
                                                f"top-1 {metrics['heldout_top1_agreement']:.1%}"))),
                        start=self.start_step, show=True,
                    )  # fmt: skip
                self.clock += metrics["heldout_eval_s"]  # tokens/s counts training time only
            self.mark = time.perf_counter()

    use_gpu = bool(cfg["use_gpu"]) and torch.cuda.is_available()
    bf16 = resolve_bf16(cfg["precision"], on_gpu=use_gpu)
    compiled = resolve_compile(cfg["torch_compile"], cfg["max_steps"])
    args = SFTConfig(
        output_dir=tempfile.mkdtemp(prefix="sft-"),
        max_steps=cfg["max_steps"],
        per_device_train_batch_size=cfg["batch_size"],
        learning_rate=cfg["learning_rate"],
        lr_scheduler_type="cosine",
        warmup_steps=cfg["warmup_steps"],
        weight_decay=0.01,
        adam_beta2=0.95,
        logging_steps=max(1, min(10, cfg["eval_every"])),
        save_strategy="steps",
        save_steps=cfg["eval_every"],
        report_to="none",
        max_length=cfg["max_length"],
        use_cpu=not use_gpu,
        bf16=bf16,
        dataset_kwargs={"skip_prepare_dataset": True},
        dataloader_num_workers=0,
        seed=cfg["seed"],
        disable_tqdm=True,
        activation_checkpointing=bool(cfg["gradient_checkpointing"]),
        torch_compile=compiled,
        ddp_find_unused_parameters=False,  # every GPT-2 parameter is used: skip DDP's extra graph walk
    )
    # TRL's own loss on a GPU (its fused LM head saves memory) unless the legal-move loss needs
    # the logits; the model's own cross-entropy on a CPU (see own_loss_sft_trainer_class)
    trainer_class = (
        SFTTrainer if use_gpu and not legal_weight else own_loss_sft_trainer_class(legal_weight, compiled)
    )
    trainer = trainer_class(model=model, args=args, train_dataset=train, processing_class=tokenizer)
    print(
        f"[sft] worker {rank}: {'cuda' if use_gpu else 'cpu'}, {'bf16 autocast' if bf16 else 'fp32'}, "
        f"{torch.get_num_threads()} torch threads, {type(trainer).__name__}"
        + (", torch.compile" if compiled else ""),
        flush=True,
    )
    trainer.remove_callback(PrinterCallback)  # its metric dicts: the driver prints progress lines instead
    trainer.add_callback(HeldoutEval())
    trainer.add_callback(RayTrainReportCallback())
    trainer = prepare_trainer(trainer)
    resume = resume_folder("sft")
    if not training_finished(resume, cfg["max_steps"], "sft"):  # a run killed after its last checkpoint: nothing to train
        trainer.train(resume_from_checkpoint=resume)


def own_loss_sft_trainer_class(legal_weight: float = 0.0, compile_loss: bool = False) -> type:
    """TRL's SFTTrainer with the model's own cross-entropy in ``compute_loss`` (for CPU training)
    plus, when ``legal_weight`` > 0, that weight times the legal-move loss, in one pass over the
    vocabulary (:func:`chessrl.lm.legality.lm_and_legal_loss`; ``compile_loss``: torch.compile'd,
    which cut its cost from +27% to +5% of a tiny CPU step).

    TRL computes the loss through its fused LM head (log-probabilities in tiles, plus entropy and
    top-1 for its metrics), which saves GPU memory. On a CPU, for a small model whose LM head is a
    large share of the FLOPs (tiny: 4k-token vocabulary, 192 wide), it costs about 45% more per
    step than the model's own loss (0.96 s against 0.66 s per 16 x 256 step, 2 threads). The data
    handling, optimizer, schedule, logging and checkpoints stay TRL's and transformers'; token
    accuracy and the token count are still logged, and with the legal-move loss its value
    (``legal_loss``) and the probability the model gives legal moves (``legal_mass``).
    """
    import torch
    from transformers import Trainer
    from trl import SFTTrainer

    from chessrl.lm.legality import lm_and_legal_loss, pad_legal_targets

    loss_fn = torch.compile(lm_and_legal_loss, dynamic=False) if compile_loss else lm_and_legal_loss

    class OwnLossSFTTrainer(SFTTrainer):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            if legal_weight:
                collate = self.data_collator

                def with_legal_moves(examples: list[dict[str, Any]]) -> dict[str, Any]:
                    legal = pad_legal_targets(
                        [e.pop("legal_moves") for e in examples],
                        [e.pop("legal_counts") for e in examples],
                        multiple=32,
                    )
                    return {**collate(examples), "legal_moves": torch.from_numpy(legal)}

                self.data_collator = with_legal_moves

        def _set_signature_columns_if_needed(self) -> None:
            super()._set_signature_columns_if_needed()
            if legal_weight:  # keep the legal moves for the collator
                self._signature_columns = [*self._signature_columns, "legal_moves", "legal_counts"]

        def compute_loss(
            self,
            model: Any,
            inputs: dict[str, Any],
            return_outputs: bool = False,
            num_items_in_batch: Any = None,
        ) -> Any:
            legal = inputs.pop("legal_moves", None)
            mode = "train" if model.training else "eval"
            logging = (
                mode == "eval" or (self.state.global_step + 1) % max(1, int(self.args.logging_steps)) == 0
            )
            if legal is not None and legal_weight:
                labels = inputs["labels"]
                if num_items_in_batch is not None and self.args.average_tokens_across_devices:
                    # the count is over every worker and DDP averages gradients: the Trainer's own
                    # scaling (Trainer.compute_loss multiplies the loss by the number of processes)
                    num_items_in_batch = num_items_in_batch / self.accelerator.num_processes
                outputs = model(**{k: v for k, v in inputs.items() if k != "labels"})
                loss, _, legal_loss, legal_mass = loss_fn(
                    outputs.logits, labels, legal.to(labels.device), legal_weight, num_items_in_batch
                )
                if logging:
                    self._metrics[mode]["legal_loss"].append(legal_loss.item())
                    self._metrics[mode]["legal_mass"].append(legal_mass.item())
            else:
                loss, outputs = Trainer.compute_loss(
                    self, model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch
                )
            if logging:
                # token accuracy on the steps that log (an argmax over every logit costs ~3% a step)
                with torch.no_grad():
                    labels = inputs["labels"][:, 1:]
                    mask = labels != -100
                    correct = ((outputs.logits[:, :-1].argmax(-1) == labels) & mask).sum()
                    both = torch.stack([correct, mask.sum()]).view(1, 2)
                    counts = self.accelerator.gather_for_metrics(both).sum(0)
                self._metrics[mode]["mean_token_accuracy"].append((counts[0] / counts[1].clamp(min=1)).item())
            if mode == "train":
                tokens = torch.tensor(inputs["input_ids"].numel(), device=inputs["input_ids"].device)
                self._total_train_tokens += int(
                    self.accelerator.gather_for_metrics(tokens.view(1)).sum().item()
                )
            self._metrics[mode]["num_tokens"] = [self._total_train_tokens]
            return (loss, outputs) if return_outputs else loss

    return OwnLossSFTTrainer


def answer_token(tokenizer: Any) -> int:
    """The token after which the board format's answer starts: the last token of `` M:`` (one
    token with the chess tokenizer, ``:`` with a BPE one; the board prompt has no other)."""
    return int(tokenizer(" M:", add_special_tokens=False)["input_ids"][-1])


def tokenize_and_pack(
    batch: dict[str, Any],
    tokenizer: Any,
    block: int,
    legal: MoveTokens | None = None,
    answer_after: int | None = None,
) -> dict[str, Any]:
    """Ray Data stage: game texts -> ``<bos> game <eos>`` token ids -> blocks of whole games.

    Each row is one block right-padded to ``block`` (``input_ids``) with its real length
    (``length``) and the number of games in the batch cut to ``block`` tokens (``truncated``, on
    the batch's first row). With ``legal``, also the legal moves at every position for the
    legal-move loss: ``legal_counts`` (``block`` counts) and ``legal_moves`` (their token ids,
    flat, one variable-length array per row). With ``answer_after`` (a token id: the board
    format's ``M:``), ``targets`` (``block`` flags) marks the tokens the loss is on: those after
    the last ``answer_after`` of each text, its ``<eos>`` included — the answer, not the prompt.
    """
    import numpy as np

    start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ids = tokenizer([str(t) for t in batch["text"]], add_special_tokens=False)["input_ids"]
    packed, truncated = pack_games([[start, *seq, tokenizer.eos_token_id] for seq in ids], block)
    rows = np.full((len(packed), block), pad, dtype=np.int32)
    for i, tokens in enumerate(packed):
        rows[i, : len(tokens)] = tokens
    counts = np.zeros(len(packed), dtype=np.int32)
    if len(packed):
        counts[0] = truncated
    out = {
        "input_ids": rows,
        "length": np.asarray([len(tokens) for tokens in packed], dtype=np.int32),
        "truncated": counts,
    }
    if answer_after is not None:
        marks = np.zeros((len(packed), block), dtype=np.uint8)
        for i, tokens in enumerate(packed):
            after = False
            for j, token in enumerate(tokens):
                if token == start:
                    after = False
                elif token == answer_after:
                    after = True
                elif after:
                    marks[i, j] = 1
        out["targets"] = marks
    if legal is not None:
        targets = [legal_move_targets(row, legal, start) for row in rows.tolist()]
        out["legal_counts"] = np.asarray([c for _, c in targets], dtype=np.uint8).reshape(len(rows), block)
        flat = np.empty(len(rows), dtype=object)
        flat[:] = [np.asarray(f, dtype=np.int16) for f, _ in targets]
        out["legal_moves"] = flat
    return out


def training_texts(cfg: SftConfig, rows: Sequence[dict[str, Any]], seed: int) -> list[dict[str, str]]:
    """The training texts of ``rows`` (games) in the configured text format, seeded."""
    if cfg.text_format in ("rookworld", "board"):
        rng = random.Random(seed)
        rookworld = cfg.text_format == "rookworld"
        return [
            {"text": text}
            for r in rows
            for text in rookworld_texts(
                str(r["moves"]).split(),
                cfg.rookworld_positions_per_game,
                env_share=cfg.rookworld_env_share if rookworld else 0.0,
                rng=rng,
                fmt=None if rookworld else BoardFormat(),
            )
        ]
    return [
        {"text": training_text(r["moves"], r["result"], condition_on_result=cfg.condition_on_result)}
        for r in rows
    ]


def legal_move_tokens(cfg: SftConfig, tokenizer: Any, log: Any) -> tuple[MoveTokens | None, float]:
    """The move tokens the legal-move loss needs, and its weight (0: off).

    ``legal_loss_weight`` null means 1.0 where the tokenizer has one token per UCI move, and off
    (said in the log) where it has not; a weight given for such a tokenizer is a ConfigError. The
    loss reads games in the moves format: with ``text_format: rookworld`` it is off, and a weight
    for it is a ConfigError.
    """
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



@dataclass(frozen=True)
class SftInputs:
    """What ``sft`` reads, checked: the tokenizer (of the base model or the preset), the model's
    context, the legal-move loss's move tokens and weight, and the games table."""

    tokenizer: Any
    n_positions: int
    legal_moves: MoveTokens | None
    legal_weight: float
    games: Storage


def check_sft(config: ChessRLConfig, inputs: Inputs, log: Any = lambda line: None) -> SftInputs:
    """Every input of ``sft``, before Ray starts: the base model (a saved folder whose tokenizer
    loads), ``max_length`` against its context, the text format's options, the legal-move loss
    for its tokenizer, and the games table (``game_id``, ``moves``, ``result``, a game at least),
    unless an earlier phase of the same graph run writes it."""
    from pipelines.artifacts import games_table

    cfg = config.sft
    if cfg.base_model:
        try:
            local = local_checkpoint(cfg.base_model)
        except ModelLoadError as exc:
            raise ModelLoadError(f"sft.base_model (--base-model): {exc}") from None
        tokenizer, n_positions = load_tokenizer(str(local)), context_length(None, str(local))
    else:
        tokenizer, n_positions = build_chess_tokenizer(), context_length(cfg.model)
    if cfg.max_length > n_positions:
        raise ConfigError(
            f"sft.max_length (--max-length) is {cfg.max_length}, but the model reads at most {n_positions} "
            f"tokens ({cfg.base_model or 'preset ' + cfg.model}): use {n_positions} or less"
        )
    if cfg.text_format != "moves" and cfg.condition_on_result:
        raise ConfigError(
            "sft.condition_on_result (--condition-on-result) prefixes whole games with their result; "
            f"the {cfg.text_format} text format has no games, only positions: leave it false"
        )
    legal_moves, legal_weight = legal_move_tokens(cfg, tokenizer, log)
    source = Storage.from_uri(cfg.games or inputs.folder("prepare").uri_of("games"))
    if cfg.games or not inputs.will_write("prepare"):
        games_table(source, ("game_id", "moves", "result"))
    return SftInputs(tokenizer, n_positions, legal_moves, legal_weight, source)


def run_sft(context: PhaseContext) -> PhaseResult:
    import pyarrow.dataset as pads
    import ray.data

    cfg = context.config.sft
    log = context.log
    folder = sft_folder(cfg.text_format)
    found = check_sft(context.config, Inputs.of_context(context), log)
    tokenizer, legal_moves, legal_weight = found.tokenizer, found.legal_moves, found.legal_weight
    source = found.games
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
    # the held-out positions, for anyone who measures the saved model the same way (prompt = the
    # moves before, optionally behind the prefix; the move the game played)
    context.phase_storage(folder).write_text(
        "heldout.json",
        json.dumps(
            [
                {"moves_before": list(p.moves_before), "next_move": p.next_move, "prefix": p.prefix}
                for p in heldout
            ]
        ),
    )
    texts = training_texts(cfg, train_rows, context.config.run.seed)
    log(
        f"{len(train_rows):,} training games, {len(held_rows):,} held out ({len(heldout)} positions) from {source.uri}"
        + (f" ({duplicates:,} duplicate games skipped)" if duplicates else "")
    )
    data_context = ray.data.DataContext.get_current()
    data_context.enable_progress_bars = sys.stderr.isatty()
    data_context.print_on_execution_start = False
    # Tokenise and pack before training starts: the trainer's workers may take every CPU.
    dataset = (
        ray.data.from_items(texts)
        .map_batches(
            tokenize_and_pack,
            fn_kwargs={
                "tokenizer": tokenizer,
                "block": cfg.max_length,
                "legal": legal_moves,
                "answer_after": answer_token(tokenizer) if cfg.text_format == "board" else None,
            },
            batch_size=512,
            batch_format="numpy",
        )
        .materialize()
    )
    blocks = dataset.count()
    sums = dataset.sum(["length", "truncated"])  # one pass over the blocks, not one per column
    game_tokens, truncated = int(sums["sum(length)"]), int(sums["sum(truncated)"])
    cpus_per_worker = cfg.cpus_per_worker or default_cpus_per_worker(cfg.num_workers)
    batch_size = cfg.batch_size
    if batch_size == "auto":
        from pipelines.batch_size import auto_batch_size

        batch_size = auto_batch_size(
            cfg.base_model or f"preset:{cfg.model}", cfg.max_length, log=log, use_gpu=cfg.use_gpu,
            share=cfg.auto_batch_memory_share, cpus=cpus_per_worker,
        )  # fmt: skip
    log(
        f"{blocks:,} blocks of {cfg.max_length} tokens: {game_tokens:,} game tokens per epoch, "
        f"{1 - game_tokens / (blocks * cfg.max_length):.1%} padding"
        + (f", {truncated:,} games longer than a block cut to its length" if truncated else "")
        + "; "
        f"{cfg.num_workers} worker(s) x {cpus_per_worker} CPU{' + 1 GPU' if cfg.use_gpu else ''}"
    )

    trainer = torch_trainer(
        context,
        folder,
        train_loop_per_worker,
        {
            "model": cfg.model,
            "base_model": cfg.base_model,
            "max_steps": cfg.max_steps,
            "batch_size": batch_size,
            "learning_rate": cfg.learning_rate,
            "warmup_steps": cfg.warmup_steps,
            "tracking_uri": context.tracking.uri,
            "tracking_run_id": context.tracking.run_id,
            "max_length": cfg.max_length,
            "eval_every": cfg.eval_every,
            "use_gpu": cfg.use_gpu,
            "gradient_checkpointing": cfg.gradient_checkpointing,
            "torch_compile": cfg.torch_compile,
            "precision": cfg.precision,
            "dropout": cfg.dropout,
            "legal_loss_weight": legal_weight,
            "text_format": cfg.text_format,
            "seed": context.config.run.seed,
            "heldout": [(list(p.moves_before), p.next_move, p.prefix) for p in heldout],
        },
        num_workers=cfg.num_workers,
        cpus_per_worker=cpus_per_worker,
        use_gpu=cfg.use_gpu,
        datasets={"train": dataset},
        progress=(board := ProgressBoard(log, "step", cfg.max_steps)),
    )
    started = time.perf_counter()
    with board:
        result = trainer.fit()
    seconds = time.perf_counter() - started
    if result.checkpoint is None:
        raise RuntimeError("sft finished without a checkpoint")
    model_out = context.phase_storage(folder).child("model")
    export_hf_checkpoint(
        result.checkpoint, model_out, edit=lambda folder: mark_text_format(folder, cfg.text_format)
    )
    metrics = {k: v for k, v in result.metrics.items() if isinstance(v, (int, float))}
    context.tracking.log_metrics(metrics)
    summary = {
        "phase": "sft",
        "games": source.uri,
        "train_games": len(train_rows),
        "heldout_games": len(held_rows),
        "duplicate_games": duplicates,
        "heldout_positions": len(heldout),
        "batch_size": batch_size,
        "steps": int(metrics.get("step", 0)),
        "resumed_from_step": int(metrics.get("resumed_from_step", 0)),
        "loss": metrics.get("loss"),
        "train_tokens_per_s": metrics.get("train_tokens_per_s"),
        "tokens_per_epoch": game_tokens,
        "padding_fraction": round(1 - game_tokens / (blocks * cfg.max_length), 4),
        "truncated_games": truncated,
        "legal_loss_weight": legal_weight,
        "legal_mass": metrics.get("legal_mass"),
        "heldout_legal_rate": metrics.get("heldout_legal_rate"),
        "heldout_top1_agreement": metrics.get("heldout_top1_agreement"),
        "model": model_out.uri,
        "seconds": round(seconds, 1),
    }
    context.phase_storage(folder).write_text("summary.json", json.dumps(summary, indent=2, sort_keys=True))
    lines = [
        "sft summary",
        f"  games         {len(train_rows):,} training, {len(held_rows):,} held out",
        f"  steps         {summary['steps']} in {seconds:.0f} s (loss {float(summary['loss'] or 'nan'):.3f})"
        + (f", resumed from step {summary['resumed_from_step']}" if summary["resumed_from_step"] else ""),
        f"  held-out      legal-move rate {float(summary['heldout_legal_rate'] or 0):.1%}, "
        f"top-1 agreement {float(summary['heldout_top1_agreement'] or 0):.1%} "
        f"on {len(heldout)} positions (argmax, unmasked)",
        *(
            [
                f"  legal loss    weight {legal_weight:g}: legal moves get {float(summary['legal_mass'] or 0):.1%} "
                "of the probability on the last logged step (training blocks)"
            ]
            if legal_weight
            else []
        ),
        f"  throughput    {float(summary['train_tokens_per_s'] or 0):,.0f} tokens/s per worker "
        f"({cfg.num_workers} worker(s), padding included; {summary['tokens_per_epoch']:,} game tokens per epoch, "
        f"{summary['padding_fraction']:.1%} padding)",
        f"  model         {model_out.uri}",
    ]
    return PhaseResult(summary=summary, lines=lines, ok=True)


PHASE = Phase(name="sft", section="sft", section_model=SftConfig, run=run_sft, check=check_sft,
              summary=SUMMARY, description=DESCRIPTION)  # fmt: skip
main = PHASE.main
if __name__ == "__main__":
    sys.exit(main())
