"""``dpo``: the sft policy trained directly on Stockfish-judged preference pairs, with TRL's
DPOTrainer inside Ray Train.

    python -m pipelines.dpo --config tiny
    chess-rl dpo --beta 0.1 --max-steps 300 --num-workers 2
    chess-rl dpo --preferences s3://bucket/runs/demo/preferences --policy s3://bucket/models/sft

Each pair of the preference Parquet (``chess-rl preferences``: a position, Stockfish's move and
a worse one) becomes the prompt that asks the policy for a move there, in the policy's own text
format (the moves so far, or the board; :func:`chessrl.rl.dpo.pair_ids`), and two completions, the
answer text of each move. Ray Data reads and tokenizes the pairs, keeps the kinds asked for
(``kinds``) and what fits the model's context; each Ray Train worker streams its own shard into
TRL's ``DPOTrainer`` (the sigmoid loss or another ``loss_type``, ``beta``, an optional NLL term on
the chosen move, ``sft_weight``), with the policy as it starts (or ``--reference``) as the frozen
reference. Every ``eval_every`` steps rank 0 measures the held-out pairs: how often the policy
finds Stockfish's move likelier than the rejected one (``heldout_choice_accuracy``, what a
player that picks the likelier move gets right; its start's figure beside it) and DPO's implicit
reward accuracy, and a checkpoint is kept under ``<storage>/<run>/dpo/ray`` (the same command
resumes there).

The final policy, at ``<storage>/<run>/dpo/model``, loads with ``AutoModelForCausalLM``. The
summary gives the start and final policies' paired move quality on positions of held-out games
(:mod:`chessrl.arena.move_quality`: the masked argmax of each scored by Stockfish, the mean difference
with its 95% interval). Measure play with ``evaluate --mode sprt --players lm:<dpo>,masked
lm:<sft>,masked``.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chessrl.lm.formats import get_format
from chessrl.lm.models import ModelLoadError, context_length, load_tokenizer, local_checkpoint
from chessrl.rl.dpo import pair_ids
from chessrl.rl.preferences import REQUIRED_COLUMNS
from chessrl.rl.reward import heldout_board
from cluster.errors import ConfigError, InputDataError, StorageError
from cluster.progress import ProgressBoard
from cluster.storage import Storage
from pipelines.artifacts import TEXT_FORMAT_KEY
from pipelines.config import ChessRLConfig, DPOConfig
from pipelines.learner import (
    default_cpus_per_worker,
    export_hf_checkpoint,
    resume_folder,
    torch_trainer,
    training_finished,
)
from pipelines.phase import Inputs, Phase, PhaseContext, PhaseResult, location, model_location

SUMMARY = "dpo: preference pairs -> a better policy, directly (Ray Train TorchTrainer + TRL DPOTrainer)."
DESCRIPTION = (
    "The sft policy (or --policy) trained on chosen/rejected move pairs in its own text format, the\n"
    "policy as it starts the frozen reference (or --reference); held-out pair accuracies every eval_every\n"
    "steps; checkpoints under <storage>/<run>/dpo/ray (a re-run resumes); the policy at\n"
    "<storage>/<run>/dpo/model, and the paired move quality of start and final in the summary. Example:\n"
    "  chess-rl dpo --beta 0.1 --max-steps 300"
)

#: The columns of a tokenized pair, as TRL's DPOTrainer reads them.
ID_COLUMNS: tuple[str, ...] = ("prompt_ids", "chosen_ids", "rejected_ids")


def train_loop_per_worker(cfg: dict[str, Any]) -> None:
    """Runs in every Ray Train worker: the policy and its frozen reference, TRL's DPOTrainer on
    this worker's stream of pairs, held-out measures on rank 0, checkpoints through Ray Train."""
    import datasets
    import ray.train
    import torch
    from datasets.iterable_dataset import ExamplesIterable
    from ray.train.huggingface.transformers import RayTrainReportCallback, prepare_trainer
    from torch.utils.data import DataLoader
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import DPOConfig as TrlDPOConfig
    from trl import DPOTrainer

    from chessrl.lm.models import load_pretrained, resolve_bf16
    from chessrl.rl.dpo import choice_accuracy, completion_logps, implicit_accuracy
    from cluster.progress import report_progress
    from cluster.tracking import RunMetricsLogger

    # TRL asks the model is_gradient_checkpointing, which transformers 5 renamed: one
    # FutureWarning per step otherwise
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
    model, tokenizer = load_pretrained(cfg["policy"])
    reference, _ = load_pretrained(cfg["reference"])
    shard = ray.train.get_dataset_shard("train")
    rank = ray.train.get_context().get_world_rank()
    mlflow = RunMetricsLogger(cfg["tracking_uri"], cfg["tracking_run_id"]) if rank == 0 else None
    probe = {k: cfg["probe"][k] for k in ID_COLUMNS}
    streaming = {"on": False}

    def rows() -> Any:
        # DPOTrainer reads one example while it is built (to tell text from images): that one
        # comes from the driver's probe row, so the Ray shard's first epoch is not started and
        # dropped. Then cycle over the shard (max_steps decides the end); every worker's shard
        # has the same number of rows, so the workers reach an epoch's end at the same step
        if not streaming["on"]:
            yield 0, probe
            return
        epoch = 0
        while True:
            seen = 0
            for batch in shard.iter_batches(
                batch_size=256,
                batch_format="numpy",
                local_shuffle_buffer_size=4096,
                local_shuffle_seed=cfg["seed"] + epoch,
            ):
                for values in zip(*(batch[k] for k in ID_COLUMNS), strict=True):
                    seen += 1
                    yield seen, {k: v.tolist() for k, v in zip(ID_COLUMNS, values, strict=True)}
            if not seen:
                raise RuntimeError("this worker's shard of the preference pairs is empty")
            epoch += 1

    features = datasets.Features({k: datasets.Sequence(datasets.Value("int32")) for k in ID_COLUMNS})
    train = datasets.IterableDataset(ExamplesIterable(rows, {}), info=datasets.DatasetInfo(features=features))

    class ShardDPOTrainer(DPOTrainer):  # type: ignore[misc]
        """TRL's DPOTrainer on pairs tokenized by the driver (:func:`chessrl.rl.dpo.pair_ids`), read
        from this worker's own shard as is (accelerate would otherwise keep every
        num_workers-th batch of it)."""

        def _prepare_dataset(self, dataset: Any, *args: Any, **kwargs: Any) -> Any:
            return dataset  # already prompt_ids / chosen_ids / rejected_ids

        def get_train_dataloader(self) -> DataLoader:
            return DataLoader(
                self.train_dataset,
                batch_size=self._train_batch_size,
                collate_fn=self.data_collator,
                num_workers=0,
            )

    heldout = [(r["prompt_ids"], r["chosen_ids"], r["rejected_ids"]) for r in cfg["heldout"]]
    pad = tokenizer.pad_token_id

    def logps(net: Any) -> tuple[list[float], list[float]]:
        chosen = completion_logps(net, [(p, c) for p, c, _ in heldout], pad)
        rejected = completion_logps(net, [(p, r) for p, _, r in heldout], pad)
        return chosen, rejected

    class HeldoutEval(TrainerCallback):  # type: ignore[misc]
        """The held-out choice and implicit-reward accuracies every ``eval_every`` steps (rank 0),
        into the trainer's log history (Ray Train's reported metrics), MLflow and a progress line."""

        def __init__(self) -> None:
            self.started = time.perf_counter()
            self.pending: dict[str, float] = {}
            self.reference: tuple[list[float], list[float]] | None = None

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            state.log_history.append({"resumed_from_step": state.global_step})
            self.first_step = state.global_step
            if rank == 0 and heldout:
                # the reference's figure; the start's too unless --reference is another model
                self.reference = logps(reference)
                self.start_accuracy = choice_accuracy(*self.reference)

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            step = state.global_step
            if rank != 0 or not (step % cfg["eval_every"] == 0 or step >= state.max_steps):
                return
            now = time.perf_counter()
            metrics: dict[str, float] = {}
            if heldout and self.reference is not None:
                chosen, rejected = logps(kw["model"])
                metrics = {
                    "heldout_choice_accuracy": choice_accuracy(chosen, rejected) or 0.0,
                    "heldout_reward_accuracy": implicit_accuracy(chosen, rejected, *self.reference) or 0.0,
                    "reference_heldout_choice_accuracy": self.start_accuracy or 0.0,
                }
            metrics["heldout_eval_s"] = time.perf_counter() - now
            done = max(1, step - self.first_step)
            metrics["train_pairs_per_s"] = (
                done * cfg["batch_size"] * cfg["world_size"] / max(1e-9, now - self.started)
            )
            self.started += metrics["heldout_eval_s"]  # the rate counts training time only
            # "iteration": what tune's ASHA counts (pipelines.tune.phase_iterations)
            state.log_history.append({**metrics, "step": step, "iteration": step})
            if mlflow is not None:
                mlflow.log(metrics, step=step)
            self.pending = metrics
            if step % args.logging_steps != 0:  # no loss is logged at this step
                self.progress(state, {})

        def on_log(
            self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any
        ) -> None:
            if logs and mlflow is not None:
                mlflow.log({k.replace("/", "_"): v for k, v in logs.items()}, step=state.global_step)
            if logs and "loss" in logs:
                self.progress(state, logs)

        def progress(self, state: Any, logs: dict[str, Any]) -> None:
            """A driver progress line: the loss and reward margin, with the held-out figures at an
            evaluation's step."""
            metrics, self.pending = self.pending, {}
            figures = []
            if "loss" in logs:
                figures.append(f"loss {float(logs['loss']):.3f}")
            if "rewards/margins" in logs:
                figures.append(f"margin {float(logs['rewards/margins']):+.3f}")
            if "heldout_choice_accuracy" in metrics:
                figures.append(
                    f"held-out: Stockfish's move likelier {metrics['heldout_choice_accuracy']:.1%} "
                    f"({cfg['reference_name']} {metrics['reference_heldout_choice_accuracy']:.1%}), "
                    f"reward accuracy {metrics['heldout_reward_accuracy']:.1%}"
                )
            report_progress(
                cfg["progress"],
                state.global_step,
                ", ".join(figures),
                start=self.first_step,
                show=bool(metrics),
            )

    use_gpu = bool(cfg["use_gpu"]) and torch.cuda.is_available()
    bf16 = resolve_bf16(cfg["precision"], on_gpu=use_gpu)
    losses = [cfg["loss_type"]] + (["sft"] if cfg["sft_weight"] > 0 else [])
    args = TrlDPOConfig(
        output_dir=tempfile.mkdtemp(prefix="dpo-"),
        max_steps=cfg["max_steps"],
        per_device_train_batch_size=cfg["batch_size"],
        learning_rate=cfg["learning_rate"],
        lr_scheduler_type="cosine",
        warmup_steps=cfg["warmup_steps"],
        weight_decay=cfg["weight_decay"],
        beta=cfg["beta"],
        loss_type=losses,
        loss_weights=[1.0, cfg["sft_weight"]] if len(losses) > 1 else None,
        label_smoothing=cfg["label_smoothing"],
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
        activation_checkpointing=False,
        ddp_find_unused_parameters=False,
    )
    trainer = ShardDPOTrainer(
        model=model, ref_model=reference, args=args, train_dataset=train, processing_class=tokenizer
    )
    streaming["on"] = True
    print(
        f"[dpo] worker {rank}: {'cuda' if use_gpu else 'cpu'}, {'bf16 autocast' if bf16 else 'fp32'}, "
        f"{torch.get_num_threads()} torch threads, loss {'+'.join(losses)}, beta {cfg['beta']:g}",
        flush=True,
    )
    trainer.remove_callback(PrinterCallback)  # its metric dicts: the driver prints progress lines instead
    trainer.add_callback(HeldoutEval())
    trainer.add_callback(RayTrainReportCallback())
    trainer = prepare_trainer(trainer)
    resume = resume_folder("dpo")
    if not training_finished(resume, cfg["max_steps"], "dpo"):  # a run killed after its last checkpoint: nothing to train
        trainer.train(resume_from_checkpoint=resume)


def model_facts(path: str, key: str) -> dict[str, Any]:
    """A saved causal LM's config (GPT-2-style, as every policy here); anything else is one
    clear error naming ``key``."""
    try:
        config = json.loads((local_checkpoint(path) / "config.json").read_text())
    except ModelLoadError as exc:
        raise StorageError(f"{key}: {exc}") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{key}: cannot read {path}/config.json: {exc}") from None
    arch = config.get("architectures") or []
    if config.get("model_type") != "gpt2" or "GPT2LMHeadModel" not in arch:
        raise ConfigError(
            f"{key}: {path} is a {config.get('model_type') or 'model_type-less'} "
            f"{'/'.join(arch) or 'checkpoint'}; dpo trains a GPT-2-style policy (GPT2LMHeadModel), "
            "e.g. this run's sft model"
        )
    return config


#: The config keys that make two GPT-2 checkpoints the same architecture.
SHAPE_KEYS: tuple[str, ...] = ("vocab_size", "n_embd", "n_layer", "n_head", "n_positions")


def check_reference(
    policy: dict[str, Any], reference: dict[str, Any], ref_path: str, policy_path: str
) -> None:
    """The reference must be the policy's architecture: the log-ratios DPO takes compare the two
    models token by token."""
    differ = [k for k in SHAPE_KEYS if policy.get(k) != reference.get(k)]
    if differ:
        said = ", ".join(f"{k} {reference.get(k)} (policy: {policy.get(k)})" for k in differ)
        raise ConfigError(
            f"dpo.reference (--reference): {ref_path} is not the policy's architecture ({policy_path}): {said}; "
            "the reference is the policy's start, or a model of the same shape and tokenizer"
        )


def text_format_of(config: dict[str, Any]) -> str:
    """The text format a policy was trained on (sft writes it into its config; moves without)."""
    return str(config.get(TEXT_FORMAT_KEY) or "moves")


@dataclass(frozen=True)
class DPOInputs:
    """What ``dpo`` reads, checked: the policy and reference locations, the policy's text format
    (None while an earlier phase of the graph run still has to write the policy), and the
    preference table's files (None likewise)."""

    policy: str
    reference: str
    text_format: str | None
    preferences: tuple[Storage, list[str], list[str], set[str]] | None
    kinds_found: dict[str, int] | None


def check_dpo(config: ChessRLConfig, inputs: Inputs) -> DPOInputs:
    """Every input of ``dpo``, before Ray starts: the policy (a GPT-2 causal LM) and its reference
    (the same architecture), the preference pairs (Parquet with the needed columns and at least
    one pair of the kinds asked for), the games table for the paired measure, and Stockfish for
    it; each unless an earlier phase of the same graph run writes it."""
    from pipelines.artifacts import preference_table

    cfg = config.dpo
    produced = inputs.will_write("sft") and not cfg.policy
    policy = model_location(
        cfg.policy, inputs.folder("sft").child("model"), "dpo.policy (--policy)", "sft", produced=produced
    )
    reference = cfg.reference or policy
    text_format = None
    if not produced:
        facts = model_facts(policy, "dpo.policy (--policy)")
        text_format = text_format_of(facts)
        if cfg.reference:
            model_location(
                cfg.reference, inputs.folder("sft").child("model"), "dpo.reference (--reference)", "sft"
            )
            check_reference(
                facts, model_facts(cfg.reference, "dpo.reference (--reference)"), cfg.reference, policy
            )
    elif cfg.reference:
        model_facts(cfg.reference, "dpo.reference (--reference)")
    pairs, kinds = None, None
    if cfg.preferences or not inputs.will_write("preferences"):
        pairs = preference_table(Storage.from_uri(cfg.preferences or inputs.folder("preferences").uri))
        kinds = pair_kinds(pairs)
        wanted = sum(n for k, n in kinds.items() if k in cfg.kinds)
        if not wanted:
            found = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) or "none"
            raise InputDataError(
                f"{pairs[0].uri} has no training pairs of the kinds dpo.kinds asks for ({', '.join(cfg.kinds)}); "
                f"it has: {found}. Widen --kinds, or make pairs with `chess-rl preferences`"
            )
    source = Storage.from_uri(cfg.games or inputs.folder("prepare").uri_of("games"))
    if cfg.games or (not inputs.will_write("prepare") and source.exists()):
        from pipelines.artifacts import games_table

        games_table(source)
    if cfg.quality_nodes > 0 and cfg.heldout_positions > 0:
        from chessrl.engine.client import find_stockfish

        find_stockfish()  # the paired move quality at the end needs it: said before any work
    return DPOInputs(policy, reference, text_format, pairs, kinds)


def pair_kinds(pairs: tuple[Storage, list[str], list[str], set[str]]) -> dict[str, int]:
    """Training pairs per kind (the ``kind`` column; "worse" for a table without one)."""
    import pyarrow.parquet as pq

    source, train, _, columns = pairs
    counts: dict[str, int] = {}
    for name in train:
        with source.fs.open_input_file(source.path(name)) as handle:
            if "kind" in columns:
                for kind in pq.read_table(handle, columns=["kind"]).column("kind").to_pylist():
                    counts[str(kind)] = counts.get(str(kind), 0) + 1
            else:
                counts["worse"] = counts.get("worse", 0) + pq.ParquetFile(handle).metadata.num_rows
    return counts


def tokenize_pairs(
    batch: dict[str, Any],
    tokenizer: Any,
    text_format: str,
    kinds: Sequence[str],
    max_length: int,
    holdout: bool,
) -> dict[str, Any]:
    """Ray Data stage: preference rows -> ``prompt_ids`` / ``chosen_ids`` / ``rejected_ids`` in the
    policy's format (:func:`chessrl.rl.dpo.pair_ids`), whether the row is kept (``keep``: a kind
    asked for, a rebuildable position, within ``max_length``) and held out (``held``: in a table
    without a train/held-out split, one board in twenty)."""
    import numpy as np

    fmt = get_format(text_format)
    n = len(batch["prompt"])
    fens = batch["fen"] if "fen" in batch else [None] * n
    row_kinds = [str(k) for k in batch["kind"]] if "kind" in batch else ["worse"] * n
    columns: dict[str, list[Any]] = {k: [] for k in ID_COLUMNS}
    keep, held = [], []
    for prompt, chosen, rejected, fen, kind in zip(
        batch["prompt"], batch["chosen"], batch["rejected"], fens, row_kinds, strict=True
    ):
        ids = pair_ids(tokenizer, fmt, str(prompt), str(fen) if fen else None, str(chosen), str(rejected))
        fits = ids is not None and len(ids.prompt) + max(len(ids.chosen), len(ids.rejected)) <= max_length
        keep.append(bool(fits and kind in kinds))
        held.append(bool(holdout and heldout_board(str(fen) if fen else str(prompt))))
        for key, value in zip(
            ID_COLUMNS, (ids.prompt, ids.chosen, ids.rejected) if ids else ([], [], []), strict=True
        ):
            columns[key].append(np.asarray(value, dtype=np.int32))
    out: dict[str, Any] = {}
    for key, values in columns.items():
        array = np.empty(len(values), dtype=object)
        array[:] = values
        out[key] = array
    return out | {
        "keep": np.asarray(keep),
        "held": np.asarray(held),
        "kind": np.asarray(row_kinds, dtype=object),
    }


def heldout_quality(
    context: PhaseContext, cfg: DPOConfig, models: dict[str, str], text_format: str
) -> dict[str, Any]:
    """The start and final policies' paired move quality on ``heldout_positions`` positions of the
    held-out games (:func:`chessrl.arena.move_quality.paired_move_quality`, Stockfish at
    ``quality_nodes``), asked in the policy's text format; empty without a games table."""
    from chessrl.arena.move_quality import heldout_positions, paired_move_quality, stockfish_expected
    from chessrl.lm.lm_data import split_games
    from chessrl.lm.models import load_pretrained
    from pipelines.artifacts import read_games

    source = Storage.from_uri(cfg.games or context.phase_storage("prepare").uri_of("games"))
    if cfg.heldout_positions == 0 or cfg.quality_nodes == 0 or (not cfg.games and not source.exists()):
        return {}
    _, held, _ = split_games(read_games(source), context.config.sft.heldout_fraction)
    if not held:
        return {}
    positions = heldout_positions(held, cfg.heldout_positions, context.config.run.seed + 1)
    loaded = {name: load_pretrained(path) for name, path in models.items()}
    with stockfish_expected(cfg.quality_nodes) as expected:
        quality = paired_move_quality(loaded, positions, text_format, expected)
    context.tracking.log_metrics({f"quality_{k}": v for k, v in quality.items()})
    return quality


def run_dpo(context: PhaseContext) -> PhaseResult:
    import ray
    import ray.data
    from ray.data.expressions import col

    from pipelines.artifacts import read_heldout

    cfg = context.config.dpo
    log = context.log
    seed = context.config.run.seed
    found = check_dpo(context.config, Inputs.of_context(context))
    assert found.preferences is not None and found.text_format is not None  # nothing is taken as given here
    policy, reference, text_format = found.policy, found.reference, found.text_format
    tokenizer = load_tokenizer(policy)
    max_length = context_length(None, str(local_checkpoint(policy)))
    source, train_files, held_files, present = found.preferences
    data_context = ray.data.DataContext.get_current()
    data_context.enable_progress_bars = sys.stderr.isatty()
    data_context.print_on_execution_start = False
    split_by_board = not held_files
    columns = [*REQUIRED_COLUMNS, *(c for c in ("fen", "kind") if c in present)]
    stage = {
        "tokenizer": tokenizer, "text_format": text_format, "kinds": list(cfg.kinds),
        "max_length": max_length, "holdout": split_by_board,
    }  # fmt: skip
    tokenized = (
        ray.data.read_parquet([source.path(f) for f in train_files], filesystem=source.fs)
        .select_columns(columns)
        .map_batches(tokenize_pairs, fn_kwargs=stage, batch_size=512, batch_format="numpy")
        .materialize()
    )
    total = tokenized.count()
    kept = tokenized.filter(expr=col("keep"))
    if split_by_board:
        train = kept.filter(expr=~col("held"))
        held_rows = [
            {k: list(r[k]) for k in ID_COLUMNS} for r in kept.filter(expr=col("held")).take(cfg.heldout_pairs)
        ]
    else:
        train = kept
        # the training pairs' rules (kinds, rebuildable, fits), applied by the same stage
        rows = read_heldout(source, held_files, cfg.heldout_pairs * 2, seed)
        batch = {c: [r.get(c) for r in rows] for c in columns}
        ids = tokenize_pairs(batch, **{**stage, "holdout": False}) if rows else {"keep": []}
        held_rows = [
            {k: ids[k][i].tolist() for k in ID_COLUMNS} for i, keep in enumerate(ids["keep"]) if keep
        ][: cfg.heldout_pairs]
    # materialized here: the trainer's workers may take every CPU, leaving none for Ray Data tasks
    train = train.select_columns(list(ID_COLUMNS)).materialize()
    train_pairs = train.count()
    left_out = total - kept.count()
    if train_pairs < cfg.batch_size * cfg.num_workers:
        raise InputDataError(
            f"{source.uri} has {train_pairs} training pairs of the kinds {', '.join(cfg.kinds)} that fit the policy: "
            f"fewer than one step (dpo.batch_size {cfg.batch_size} x {cfg.num_workers} worker(s)); make more with "
            "`chess-rl preferences --positions N`, or lower --batch-size"
        )
    [probe] = train.take(1)
    cpus_per_worker = cfg.cpus_per_worker or default_cpus_per_worker(cfg.num_workers)
    log(
        f"{train_pairs:,} training pairs ({', '.join(cfg.kinds)}) and {len(held_rows):,} held-out pairs from "
        f"{source.uri}"
        + (f" ({left_out:,} of other kinds, too long or unreadable left out)" if left_out else "")
        + f"; policy {policy} ({text_format} format), reference {'the policy as it starts' if reference == policy else reference}; "
        f"{cfg.loss_type} loss, beta {cfg.beta:g}"
        + (f", sft weight {cfg.sft_weight:g}" if cfg.sft_weight else "")
        + f"; {cfg.num_workers} worker(s) x {cpus_per_worker} CPU"
        + (" + 1 GPU" if cfg.use_gpu else "")
    )
    trainer = torch_trainer(
        context,
        "dpo",
        train_loop_per_worker,
        {
            "policy": policy,
            "reference": reference,
            "reference_name": "start" if reference == policy else "reference",
            "max_steps": cfg.max_steps,
            "batch_size": cfg.batch_size,
            "learning_rate": cfg.learning_rate,
            "warmup_steps": cfg.warmup_steps,
            "weight_decay": cfg.weight_decay,
            "beta": cfg.beta,
            "loss_type": cfg.loss_type,
            "sft_weight": cfg.sft_weight,
            "label_smoothing": cfg.label_smoothing,
            "eval_every": cfg.eval_every,
            "use_gpu": cfg.use_gpu,
            "precision": cfg.precision,
            "seed": seed,
            "world_size": cfg.num_workers,
            "heldout": held_rows,
            "probe": {k: list(probe[k]) for k in ID_COLUMNS},
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
        raise RuntimeError("dpo finished without a checkpoint")
    from ray.train.huggingface.transformers import RayTrainReportCallback

    def keep_format(folder: Path) -> None:
        config = json.loads((folder / "config.json").read_text())
        config[TEXT_FORMAT_KEY] = text_format
        (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")

    model_out = context.phase_storage("dpo").child("model")
    export_hf_checkpoint(
        result.checkpoint, model_out, keep_format, subfolder=RayTrainReportCallback.CHECKPOINT_NAME
    )
    metrics = {k: v for k, v in result.metrics.items() if isinstance(v, (int, float))}
    context.tracking.log_metrics({k.replace("/", "_"): v for k, v in metrics.items()})
    quality: dict[str, Any] = {}
    if cfg.heldout_positions and cfg.quality_nodes:
        log(
            f"trained in {seconds:.0f} s; the start and final policies on {cfg.heldout_positions} held-out positions"
        )
        quality = heldout_quality(context, cfg, {"start": policy, "final": location(model_out)}, text_format)
    summary = {
        "phase": "dpo",
        "policy": policy,
        "reference": reference,
        "text_format": text_format,
        "preferences": source.uri,
        "kinds": list(cfg.kinds),
        "train_pairs": train_pairs,
        "heldout_pairs": len(held_rows),
        "left_out_pairs": left_out,
        "loss_type": cfg.loss_type,
        "beta": cfg.beta,
        "sft_weight": cfg.sft_weight,
        "steps": int(metrics.get("step", 0)),
        "resumed_from_step": int(metrics.get("resumed_from_step", 0)),
        "loss": metrics.get("loss"),
        "train_reward_accuracy": metrics.get("rewards/accuracies"),
        "train_reward_margin": metrics.get("rewards/margins"),
        "heldout_choice_accuracy": metrics.get("heldout_choice_accuracy"),
        "reference_heldout_choice_accuracy": metrics.get("reference_heldout_choice_accuracy"),
        "heldout_reward_accuracy": metrics.get("heldout_reward_accuracy"),
        "train_pairs_per_s": metrics.get("train_pairs_per_s"),
        "quality": quality,
        "model": model_out.uri,
        "seconds": round(seconds, 1),
    }
    context.phase_storage("dpo").write_text("summary.json", json.dumps(summary, indent=2, sort_keys=True))
    return PhaseResult(summary=summary, lines=summary_lines(summary, cfg), ok=True)


def summary_lines(summary: dict[str, Any], cfg: DPOConfig) -> list[str]:
    """The phase's closing lines."""
    from chessrl.arena.move_quality import quality_line

    def pct(key: str) -> str:
        return "n/a" if summary.get(key) is None else f"{float(summary[key]):.1%}"

    return [
        "dpo summary",
        f"  pairs         {summary['train_pairs']:,} training ({', '.join(summary['kinds'])}), "
        f"{summary['heldout_pairs']:,} held out"
        + (f" ({summary['left_out_pairs']:,} left out)" if summary["left_out_pairs"] else ""),
        f"  steps         {summary['steps']} in {summary['seconds']:.0f} s ({summary['loss_type']}, beta "
        f"{summary['beta']:g}; loss {float(summary['loss'] if summary['loss'] is not None else 'nan'):.3f}, "
        f"training reward accuracy {pct('train_reward_accuracy')})"
        + (f", resumed from step {summary['resumed_from_step']}" if summary["resumed_from_step"] else ""),
        f"  held-out      Stockfish's move the likelier on {pct('heldout_choice_accuracy')} of pairs "
        f"({'start' if summary['reference'] == summary['policy'] else 'reference'}: "
        f"{pct('reference_heldout_choice_accuracy')}); implicit reward accuracy {pct('heldout_reward_accuracy')}",
        *(
            [
                f"  paired        {quality_line(summary['quality'])} (masked argmax, Stockfish {cfg.quality_nodes} nodes)"
            ]
            if summary["quality"]
            else []
        ),
        f"  throughput    {float(summary['train_pairs_per_s'] or 0):,.0f} pairs/s",
        f"  model         {summary['model']}",
    ]


PHASE = Phase(name="dpo", section="dpo", section_model=DPOConfig, run=run_dpo, check=check_dpo,
              summary=SUMMARY, description=DESCRIPTION)  # fmt: skip
main = PHASE.main
if __name__ == "__main__":
    sys.exit(main())
