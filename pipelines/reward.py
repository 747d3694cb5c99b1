"""``reward``: preference pairs -> a reward model, with TRL's RewardTrainer inside Ray Train.

    python -m pipelines.reward --config tiny
    chess-rl reward --max-steps 1000 --num-workers 2 --eval-every 100
    chess-rl reward --preferences s3://bucket/runs/demo/preferences --base-model s3://bucket/models/sft

The model is ``GPT2ForSequenceClassification`` with one label: the transformer of the SFT model
(or ``--base-model``, any GPT-2-style checkpoint) under a new score head. Pairs are read from
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
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chessrl.lm.formats import get_format
from chessrl.lm.models import ModelLoadError, context_length, load_tokenizer, local_checkpoint
from chessrl.rl.preferences import LEGAL_KINDS, REQUIRED_COLUMNS, mover_cp_after
from chessrl.rl.reward import TEXT_FORMAT_KEY, heldout_board, pair_texts, query_ids, reward_format, text_ids
from cluster.errors import ConfigError, InputDataError, StorageError
from cluster.progress import ProgressBoard
from cluster.storage import Storage
from pipelines.artifacts import preference_table, read_heldout
from pipelines.config import ChessRLConfig, RewardConfig
from pipelines.learner import (
    default_cpus_per_worker,
    export_hf_checkpoint,
    resume_folder,
    torch_trainer,
    training_finished,
)
from pipelines.phase import Inputs, Phase, PhaseContext, PhaseResult, location

SUMMARY = "reward: preference pairs -> a reward model (Ray Train TorchTrainer + TRL RewardTrainer)."
DESCRIPTION = (
    "GPT2ForSequenceClassification on the sft model's transformer (or --base-model), trained on\n"
    "chosen/rejected pairs; held-out pairwise accuracy and Spearman correlation with Stockfish every\n"
    "eval_every steps; checkpoints under <storage>/<run>/reward/ray (a re-run resumes); the model\n"
    "at <storage>/<run>/reward/model, with the reward mean and std in its config. Example:\n"
    "  chess-rl reward --max-steps 300 --num-workers 2"
)


def train_loop_per_worker(cfg: dict[str, Any]) -> None:
    """Runs in every Ray Train worker: the RM from the backbone, TRL's RewardTrainer on this
    worker's stream of pairs, held-out evaluation on rank 0, checkpoints through Ray Train."""
    import datasets
    import ray.train
    import torch
    from datasets.iterable_dataset import ExamplesIterable
    from ray.train.huggingface.transformers import RayTrainReportCallback, prepare_trainer
    from torch.utils.data import DataLoader
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import RewardConfig as TrlRewardConfig
    from trl import RewardTrainer

    from chessrl.lm.models import resolve_bf16
    from chessrl.rl.reward import evaluate_reward_model
    from cluster.progress import report_progress
    from cluster.tracking import RunMetricsLogger

    model, tokenizer = reward_model_from_backbone(cfg["base_model"])
    shard = ray.train.get_dataset_shard("train")
    rank = ray.train.get_context().get_world_rank()
    mlflow = RunMetricsLogger(cfg["tracking_uri"], cfg["tracking_run_id"]) if rank == 0 else None

    def rows() -> Any:
        # cycle over the shard: max_steps decides when training ends. Every worker's shard has the
        # same number of rows and every step takes batch_size of them, so the workers reach the
        # end of an epoch (where Ray Data's split waits for all of them) at the same step
        epoch = 0
        while True:
            seen = 0
            for batch in shard.iter_batches(
                batch_size=256,
                batch_format="numpy",
                local_shuffle_buffer_size=4096,
                local_shuffle_seed=cfg["seed"] + epoch,
            ):
                for chosen, rejected in zip(batch["chosen_ids"], batch["rejected_ids"], strict=True):
                    seen += 1
                    yield seen, {"chosen_ids": chosen.tolist(), "rejected_ids": rejected.tolist()}
            if not seen:
                raise RuntimeError("this worker's shard of the preference pairs is empty")
            epoch += 1

    features = datasets.Features(
        {
            "chosen_ids": datasets.Sequence(datasets.Value("int32")),
            "rejected_ids": datasets.Sequence(datasets.Value("int32")),
        }
    )
    # ExamplesIterable with declared features: TRL sees tokenized columns without reading an
    # example (reading one would start, then drop, an epoch of the Ray shard)
    train = datasets.IterableDataset(ExamplesIterable(rows, {}), info=datasets.DatasetInfo(features=features))

    class ShardRewardTrainer(RewardTrainer):  # type: ignore[misc]
        """TRL's RewardTrainer reading this worker's own shard as is: accelerate would otherwise
        keep every num_workers-th batch of it (its split of an unsharded iterable dataset)."""

        def get_train_dataloader(self) -> DataLoader:
            return DataLoader(
                self.train_dataset,
                batch_size=self._train_batch_size,
                collate_fn=self.data_collator,
                num_workers=0,
            )

    heldout = cfg["heldout"]
    spearman_set = cfg["spearman"]

    class HeldoutEval(TrainerCallback):  # type: ignore[misc]
        """Held-out pairwise accuracy and Spearman every ``eval_every`` steps (rank 0), into the
        trainer's log history (Ray Train's reported metrics), MLflow and one progress line."""

        def __init__(self) -> None:
            self.started = time.perf_counter()
            self.pending: dict[str, float] | None = None

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            state.log_history.append({"resumed_from_step": state.global_step})
            self.first_step = state.global_step

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            step = state.global_step
            if rank != 0 or not (step % cfg["eval_every"] == 0 or step >= state.max_steps):
                return
            now = time.perf_counter()
            metrics = evaluate_reward_model(
                kw["model"], heldout, spearman_set, tokenizer.pad_token_id, LEGAL_KINDS
            )
            metrics["heldout_eval_s"] = time.perf_counter() - now
            done = max(1, step - self.first_step)
            metrics["train_pairs_per_s"] = (
                done * cfg["batch_size"] * cfg["world_size"] / max(1e-9, now - self.started)
            )
            self.started += metrics["heldout_eval_s"]  # the rate counts training time only
            state.log_history.append({**metrics, "step": step})
            if mlflow is not None:
                mlflow.log(metrics, step=step)
            self.pending = metrics
            if step % args.logging_steps != 0:  # no loss is logged at this step
                self.progress(state, None)

        def on_log(
            self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any
        ) -> None:
            if logs and mlflow is not None:
                mlflow.log(logs, step=state.global_step)
            if logs and "loss" in logs:
                self.progress(state, float(logs["loss"]))

        def progress(self, state: Any, loss: float | None) -> None:
            """A driver progress line: the loss, with the held-out figures at an evaluation's step."""
            if rank != 0:
                return
            metrics, self.pending = self.pending or {}, None
            figures = [f"loss {loss:.3f}"] if loss is not None else []
            for key, text in (
                ("heldout_accuracy", "held-out accuracy {:.1%}"),
                ("heldout_accuracy_legal", "on legal moves {:.1%}"),
                ("heldout_spearman", "Spearman {:.3f}"),
            ):
                if key in metrics:
                    figures.append(text.format(metrics[key]))
            report_progress(
                cfg["progress"],
                state.global_step,
                ", ".join(figures),
                start=self.first_step,
                show=bool(metrics),
            )

    use_gpu = bool(cfg["use_gpu"]) and torch.cuda.is_available()
    bf16 = resolve_bf16(cfg["precision"], on_gpu=use_gpu)
    args = TrlRewardConfig(
        output_dir=tempfile.mkdtemp(prefix="reward-"),
        max_steps=cfg["max_steps"],
        per_device_train_batch_size=cfg["batch_size"],
        learning_rate=cfg["learning_rate"],
        lr_scheduler_type="cosine",
        warmup_steps=cfg["warmup_steps"],
        weight_decay=cfg["weight_decay"],
        center_rewards_coefficient=cfg["center_rewards_coefficient"],
        max_length=None,  # too-long pairs were dropped (and counted) before the split
        # a divisor of eval_every: the loss is logged at every evaluation's step
        logging_steps=max(d for d in range(1, 11) if cfg["eval_every"] % d == 0),
        save_strategy="steps",
        save_steps=cfg["eval_every"],
        report_to="none",
        use_cpu=not use_gpu,
        bf16=bf16,
        dataloader_num_workers=0,
        seed=cfg["seed"],
        disable_tqdm=True,
        activation_checkpointing=False,  # (gradient_checkpointing: a deprecated alias that warns)
        ddp_find_unused_parameters=False,
    )
    trainer = ShardRewardTrainer(model=model, args=args, train_dataset=train, processing_class=tokenizer)
    print(
        f"[reward] worker {rank}: {'cuda' if use_gpu else 'cpu'}, {'bf16 autocast' if bf16 else 'fp32'}, "
        f"{torch.get_num_threads()} torch threads",
        flush=True,
    )
    trainer.remove_callback(PrinterCallback)  # its metric dicts: the driver prints progress lines instead
    trainer.add_callback(HeldoutEval())
    trainer.add_callback(RayTrainReportCallback())
    trainer = prepare_trainer(trainer)
    resume = resume_folder("reward")
    if not training_finished(resume, cfg["max_steps"], "reward"):  # a run killed after its last checkpoint: nothing to train
        trainer.train(resume_from_checkpoint=resume)


def reward_model_from_backbone(path: str) -> tuple[Any, Any]:
    """``GPT2ForSequenceClassification`` (one label) from a GPT-2-style checkpoint: a causal LM's
    transformer gets a new score head; a saved reward model loads as it is. Its pad token id is
    the tokenizer's (the model scores the last token that is not padding)."""
    from transformers import GPT2ForSequenceClassification
    from transformers.utils import logging as hf_logging

    local = local_checkpoint(path)
    tokenizer = load_tokenizer(str(local))
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # "score.weight newly initialized": that is the point
    try:
        model = GPT2ForSequenceClassification.from_pretrained(local, num_labels=1)
    finally:
        hf_logging.set_verbosity(verbosity)
    model.config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def check_backbone(path: str, key: str = "reward.base_model (--base-model)") -> Path:
    """The local folder of a GPT-2-style checkpoint; anything else is one clear error."""
    try:
        local = local_checkpoint(path)
    except ModelLoadError as exc:
        raise StorageError(f"{key}: {exc}") from None
    try:
        config = json.loads((local / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{key}: cannot read {path}/config.json: {exc}") from None
    kind = config.get("model_type")
    if kind != "gpt2":
        raise ConfigError(
            f"{key}: {path} is a {kind or 'model_type-less'} checkpoint; the reward model is "
            "GPT2ForSequenceClassification, so it needs a GPT-2-style one (model_type gpt2), "
            "e.g. this run's sft model"
        )
    return local


def base_model_location(config: ChessRLConfig, inputs: Inputs) -> str:
    cfg = config.reward
    if cfg.base_model:
        return cfg.base_model
    model = inputs.folder("sft").child("model")
    if not inputs.will_write("sft") and not model.exists("config.json"):
        raise StorageError(
            f"no sft model at {model.uri}: run `chess-rl sft` first, or pass --base-model DIR|s3://..."
        )
    return location(model)


@dataclass(frozen=True)
class RewardInputs:
    """What ``reward`` reads, checked: the base model (its local folder; None while an earlier
    phase of the graph run still has to write it) and the preference table's files."""

    base: str
    local: Path | None
    preferences: tuple[Storage, list[str], list[str], set[str]] | None


def check_reward(config: ChessRLConfig, inputs: Inputs) -> RewardInputs:
    """Every input of ``reward``, before Ray starts: the base model (a GPT-2-style checkpoint)
    and the preference pairs (Parquet with the needed columns, a train/ split if held-out pairs
    are there), each unless an earlier phase of the same graph run writes it."""
    cfg = config.reward
    base = base_model_location(config, inputs)
    local = None if not cfg.base_model and inputs.will_write("sft") else check_backbone(base)
    pairs = None
    if cfg.preferences or not inputs.will_write("preferences"):
        pairs = preference_files(config, inputs)
    return RewardInputs(base, local, pairs)


def preference_files(config: ChessRLConfig, inputs: Inputs) -> tuple[Storage, list[str], list[str], set[str]]:
    """The preference table's training and held-out Parquet files (relative names) and the
    columns every file has; a missing, empty or wrong-schema table is one clear error."""
    cfg = config.reward
    return preference_table(Storage.from_uri(cfg.preferences or inputs.folder("preferences").uri))



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
    boards: dict[str, tuple[str, list[str]]] = {}
    for pair in pairs:
        moves = str(pair["prompt"]).split()
        board = chess.Board()
        try:
            for uci in moves:
                board.push_uci(uci)
        except ValueError:
            continue  # a prompt that is not a move list from the start: no legal moves to rank
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
        import ray

        engines = max(1, int(ray.cluster_resources().get("CPU", 1)))
        pool = EnginePool.create(1, engines, run=f"{context.config.run.name}-reward", num_cpus_per_engine=0.5)
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
            "ids": [query_ids(tokenizer, RewardQuery(tuple(p["moves"]), move), fmt) for move in p["scores"]],
            "cp": list(p["scores"].values()),
        }
        for p in cached["positions"]
    ]


def normalizer_stats(checkpoint: Any, sample: list[dict[str, Any]], name: str) -> tuple[float, float]:
    """Ray task: mean and std of the trained model's scores on training pairs (chosen and rejected)."""
    import statistics

    from chessrl.rl.reward import score_ids

    with checkpoint.as_directory() as folder:
        model, tokenizer = reward_model_from_backbone(str(Path(folder) / name))
    model.eval()
    rows = [p["chosen_ids"] for p in sample] + [p["rejected_ids"] for p in sample]
    scores = score_ids(model, rows, tokenizer.pad_token_id)
    return statistics.fmean(scores), statistics.pstdev(scores) if len(scores) > 1 else 1.0


def run_reward(context: PhaseContext) -> PhaseResult:
    import ray
    import ray.data
    from ray.data.expressions import col

    cfg = context.config.reward
    log = context.log
    seed = context.config.run.seed
    found = check_reward(context.config, Inputs.of_context(context))
    base, local = found.base, found.local
    assert local is not None and found.preferences is not None  # nothing is taken as given here
    tokenizer = load_tokenizer(str(local))
    max_length = context_length(None, str(local))
    # what the judge reads: the configured format, else the backbone's own
    text_format = cfg.text_format or reward_format(json.loads((local / "config.json").read_text())).name
    source, train_files, held_files, present = found.preferences
    data_context = ray.data.DataContext.get_current()
    data_context.enable_progress_bars = sys.stderr.isatty()
    data_context.print_on_execution_start = False
    # tokenize in Ray Data, then keep what fits the model's context
    split_by_board = not held_files
    columns = [*REQUIRED_COLUMNS, *(c for c in ("fen", "kind") if c in present)]
    tokenized = (
        ray.data.read_parquet([source.path(f) for f in train_files], filesystem=source.fs)
        .select_columns(columns)
        .map_batches(
            tokenize_pairs,
            fn_kwargs={
                "tokenizer": tokenizer,
                "max_length": max_length,
                "holdout": split_by_board,
                "text_format": text_format,
            },  # fmt: skip
            batch_size=512,
            batch_format="numpy",
        )
        .materialize()
    )
    total = tokenized.count()
    fitting = tokenized.filter(expr=col("fits"))
    if split_by_board:
        train = fitting.filter(expr=~col("held"))
        held_rows = [
            {"chosen_ids": list(r["chosen_ids"]), "rejected_ids": list(r["rejected_ids"]), "kind": r["kind"]}
            for r in fitting.filter(expr=col("held")).take(cfg.heldout_pairs)
        ]
        held_pairs: list[dict[str, Any]] = []
    else:
        train = fitting
        held_pairs = read_heldout(source, held_files, cfg.heldout_pairs, seed)
        held_rows = [
            {"chosen_ids": ids[0], "rejected_ids": ids[1], "kind": str(p.get("kind") or "worse")}
            for p in held_pairs
            if (ids := pair_ids(tokenizer, text_format, p)) is not None
        ]
        held_rows = [r for r in held_rows if max(len(r["chosen_ids"]), len(r["rejected_ids"])) <= max_length]
    # materialized here: the trainer's workers may take every CPU, leaving none for Ray Data tasks
    train = train.select_columns(["chosen_ids", "rejected_ids"]).materialize()
    train_pairs = train.count()
    too_long = total - fitting.count()
    if train_pairs < cfg.batch_size * cfg.num_workers:
        raise InputDataError(
            f"{source.uri} has {train_pairs} training pairs that fit the model: fewer than one step "
            f"(reward.batch_size {cfg.batch_size} x {cfg.num_workers} worker(s)); make more with "
            "`chess-rl preferences --positions N`, or lower --batch-size"
        )
    spearman = (
        spearman_positions(context, held_pairs, tokenizer, text_format)
        if held_pairs and cfg.spearman_positions
        else []
    )
    sample = [
        {"chosen_ids": list(r["chosen_ids"]), "rejected_ids": list(r["rejected_ids"])}
        for r in train.take(cfg.normalize_pairs)
    ]
    cpus_per_worker = cfg.cpus_per_worker or default_cpus_per_worker(cfg.num_workers)
    log(
        f"{train_pairs:,} training pairs, {len(held_rows):,} held-out pairs and {len(spearman)} held-out "
        f"positions for the rank correlation, from {source.uri}"
        + (f" ({too_long:,} pairs longer than the model's {max_length} tokens left out)" if too_long else "")
        + f"; backbone {base}, reading the {text_format} text; {cfg.num_workers} worker(s) x {cpus_per_worker} CPU"
        + (" + 1 GPU" if cfg.use_gpu else "")
    )
    trainer = torch_trainer(
        context,
        "reward",
        train_loop_per_worker,
        {
            "base_model": base,
            "max_steps": cfg.max_steps,
            "batch_size": cfg.batch_size,
            "learning_rate": cfg.learning_rate,
            "warmup_steps": cfg.warmup_steps,
            "weight_decay": cfg.weight_decay,
            "center_rewards_coefficient": cfg.center_rewards_coefficient,
            "eval_every": cfg.eval_every,
            "use_gpu": cfg.use_gpu,
            "precision": cfg.precision,
            "seed": seed,
            "world_size": cfg.num_workers,
            "heldout": held_rows,
            "spearman": spearman,
            "tracking_uri": context.tracking.uri,
            "tracking_run_id": context.tracking.run_id,
        },
        num_workers=cfg.num_workers,
        cpus_per_worker=cpus_per_worker,
        use_gpu=cfg.use_gpu,
        datasets={"train": train},
        progress=(board := ProgressBoard(log, "step", cfg.max_steps)),
    )
    started = time.perf_counter()
    with board:
        result = trainer.fit()
    seconds = time.perf_counter() - started
    if result.checkpoint is None:
        raise RuntimeError("reward finished without a checkpoint")
    from ray.train.huggingface.transformers import RayTrainReportCallback

    name = RayTrainReportCallback.CHECKPOINT_NAME
    log(
        f"trained in {seconds:.0f} s; scoring {len(sample):,} training pairs for the reward's mean and std (its normalisation)"
    )
    mean, std = ray.get(ray.remote(num_cpus=1)(normalizer_stats).remote(result.checkpoint, sample, name))

    def add_normalizer(folder: Path) -> None:
        config = json.loads((folder / "config.json").read_text())
        config.update(chessrl_reward_mean=mean, chessrl_reward_std=std)
        config[TEXT_FORMAT_KEY] = text_format  # what it reads: the RewardServer asks in it
        (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))

    model_out = context.phase_storage("reward").child("model")
    export_hf_checkpoint(result.checkpoint, model_out, add_normalizer, subfolder=name)
    metrics = {k: v for k, v in result.metrics.items() if isinstance(v, (int, float))}
    context.tracking.log_metrics({**metrics, "reward_mean": mean, "reward_std": std})
    summary = {
        "phase": "reward",
        "preferences": source.uri,
        "base_model": base,
        "text_format": text_format,
        "train_pairs": train_pairs,
        "heldout_pairs": len(held_rows),
        "too_long_pairs": too_long,
        "spearman_positions": len(spearman),
        "steps": int(metrics.get("step", 0)),
        "resumed_from_step": int(metrics.get("resumed_from_step", 0)),
        "loss": metrics.get("loss"),
        "train_accuracy": metrics.get("accuracy"),
        "heldout_accuracy": metrics.get("heldout_accuracy"),
        "heldout_accuracy_legal": metrics.get("heldout_accuracy_legal"),
        "heldout_accuracy_random": metrics.get("heldout_accuracy_random"),
        "heldout_spearman": metrics.get("heldout_spearman"),
        "train_pairs_per_s": metrics.get("train_pairs_per_s"),
        "reward_mean": mean,
        "reward_std": std,
        "model": model_out.uri,
        "seconds": round(seconds, 1),
    }
    context.phase_storage("reward").write_text("summary.json", json.dumps(summary, indent=2, sort_keys=True))

    def pct(key: str) -> str:
        return "n/a" if summary[key] is None else f"{float(summary[key]):.1%}"

    lines = [
        "reward summary",
        f"  pairs         {train_pairs:,} training, {len(held_rows):,} held out, read as {text_format} text"
        + (f" ({too_long:,} too long or without a position, left out)" if too_long else ""),
        f"  steps         {summary['steps']} in {seconds:.0f} s (loss {float(summary['loss'] or 'nan'):.3f}, "
        f"training accuracy {pct('train_accuracy')})"
        + (f", resumed from step {summary['resumed_from_step']}" if summary["resumed_from_step"] else ""),
        f"  held-out      pairwise accuracy {pct('heldout_accuracy')} "
        f"(on pairs of legal moves {pct('heldout_accuracy_legal')}; Stockfish's move above a random "
        f"legal one {pct('heldout_accuracy_random')}); "
        + (
            f"Spearman {float(summary['heldout_spearman']):.3f} with Stockfish over the legal moves of "
            f"{len(spearman)} positions"
            if summary["heldout_spearman"] is not None
            else "no Spearman (no held-out positions)"
        ),
        f"  normalisation reward mean {mean:.3f}, std {std:.3f} (saved in the model's config)",
        f"  throughput    {float(summary['train_pairs_per_s'] or 0):,.0f} pairs/s",
        f"  model         {model_out.uri}",
    ]
    return PhaseResult(summary=summary, lines=lines, ok=True)


PHASE = Phase(name="reward", section="reward", section_model=RewardConfig, run=run_reward, check=check_reward,
              summary=SUMMARY, description=DESCRIPTION)  # fmt: skip
main = PHASE.main
if __name__ == "__main__":
    sys.exit(main())
