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
finds the chosen move (Stockfish's, or the judge's where ``preferences --judge model`` made the
pairs) likelier than the rejected one (``heldout_choice_accuracy``, what a
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

import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from chessrl.lm.formats import get_format
from chessrl.rl.dpo import pair_ids
from chessrl.rl.reward import heldout_board
from cluster.errors import ConfigError, InputDataError
from cluster.storage import Storage
from pipelines.cli import one_line
from pipelines.common.artifacts import TEXT_FORMAT_KEY, mark_text_format, pairs_chooser, read_heldout
from pipelines.common.phase import (
    Inputs,
    Phase,
    PhaseContext,
    PhaseResult,
    gpt2_config,
    location,
    model_location,
)
from pipelines.config import ChessRLConfig, DPOConfig
from pipelines.learner import final_metrics
from pipelines.learner import trl as trl_learner
from pipelines.learner.quality import heldout_quality

SUMMARY = one_line("dpo")
DESCRIPTION = (
    "The sft policy (or --policy) trained on chosen/rejected move pairs in its own text format, the\n"
    "policy as it starts the frozen reference (or --reference); held-out pair accuracies every eval_every\n"
    "steps; checkpoints under <storage>/<run>/dpo/ray (a re-run resumes); the policy at\n"
    "<storage>/<run>/dpo/model, and the paired move quality of start and final in the summary. Example:\n"
    "  chess-rl dpo --beta 0.1 --max-steps 300"
)

#: The columns of a tokenized pair, as TRL's DPOTrainer reads them.
ID_COLUMNS: tuple[str, ...] = ("prompt_ids", "chosen_ids", "rejected_ids")


@dataclass(frozen=True, kw_only=True)
class DPOLoopConfig(trl_learner.PairsLoopConfig):
    """What the dpo learner's workers read beside :class:`~pipelines.learner.trl.PairsLoopConfig`'s
    fields, built by the driver (:func:`loop_config`), frozen: the workers read it as attributes."""

    policy: str
    """The policy to train (a saved LM)."""
    reference: str
    """The frozen reference (a saved LM: the policy itself unless ``--reference``)."""
    reference_name: str
    """What the progress lines call the reference's figure ("start" or "reference")."""
    chooser: str
    """Who chose the pairs' preferred move ("Stockfish" or "the judge"), for the progress lines."""
    beta: float
    """DPO's beta."""
    loss_type: str
    """TRL's DPO loss (sigmoid, ipo, ...)."""
    sft_weight: float
    """The weight of an NLL term on the chosen move (0: none)."""
    label_smoothing: float
    """The sigmoid loss's label smoothing."""
    probe: dict[str, Any]
    """One training pair, the example DPOTrainer reads while it is built."""


def train_loop_per_worker(loop_config: dict[str, Any]) -> None:
    """Runs in every Ray Train worker: the policy and its frozen reference, TRL's DPOTrainer on
    this worker's stream of pairs, held-out measures on rank 0, checkpoints through Ray Train.
    ``loop_config`` is Ray Train's: a :class:`DPOLoopConfig` under ``config``."""
    import ray.train
    from trl import DPOConfig as TrlDPOConfig
    from trl import DPOTrainer

    from chessrl.arena.saved_models import load_saved_model

    class ShardDPOTrainer(PreTokenized, trl_learner.OwnShardLoader, DPOTrainer):  # type: ignore[misc]
        """TRL's DPOTrainer on pairs tokenized by the driver, read from this worker's own shard as is."""

    # TRL asks the model is_gradient_checkpointing, which transformers 5 renamed: one
    # FutureWarning per step otherwise
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
    cfg = DPOLoopConfig.of(loop_config)
    model, tokenizer = load_saved_model(cfg.policy, "policy")
    reference, _ = load_saved_model(cfg.reference, "policy")
    setup = trl_learner.worker_setup(cfg)
    # DPOTrainer reads one example while it is built (to tell text from images): that one comes
    # from the driver's probe row, so the Ray shard's first epoch is not started and dropped
    probe = {k: cfg.probe[k] for k in ID_COLUMNS}
    rows = trl_learner.ShardRows(ray.train.get_dataset_shard("train"), cfg.seed, ID_COLUMNS, probe=probe)
    losses = [cfg.loss_type] + (["sft"] if cfg.sft_weight > 0 else [])
    args = trl_learner.training_arguments(
        TrlDPOConfig,
        cfg,
        "dpo",
        setup,
        weight_decay=cfg.weight_decay,
        beta=cfg.beta,
        loss_type=losses,
        loss_weights=[1.0, cfg.sft_weight] if len(losses) > 1 else None,
        label_smoothing=cfg.label_smoothing,
        max_length=None,  # too-long pairs were dropped (and counted) before the split
        logging_steps=trl_learner.logging_divisor(cfg.eval_every),  # a loss logged at each evaluation's step
        activation_checkpointing=False,
    )
    trainer = ShardDPOTrainer(
        model=model,
        ref_model=reference,
        args=args,
        train_dataset=trl_learner.stream_dataset(rows, ID_COLUMNS),
        processing_class=tokenizer,
    )
    rows.start()
    note = f", loss {'+'.join(losses)}, beta {cfg.beta:g}"
    evaluation = DPOEval(cfg, setup, reference, tokenizer.pad_token_id)
    trl_learner.train_with_trl(trainer, "dpo", cfg, setup, evaluation, note)


class PreTokenized:
    """Mixin for TRL's DPOTrainer (before it in the bases): the pairs come tokenized by the driver
    (:func:`chessrl.rl.dpo.pair_ids`), ``prompt_ids`` / ``chosen_ids`` / ``rejected_ids``."""

    def _prepare_dataset(self, dataset: Any, *args: Any, **kwargs: Any) -> Any:
        return dataset


class DPOEval(trl_learner.PairsEval):
    """The held-out choice and implicit-reward accuracies every ``eval_every`` steps (rank 0),
    into the trainer's log history (Ray Train's reported metrics, with ``iteration``: what tune's
    ASHA counts, :func:`pipelines.tune.phase_iterations`), MLflow and a progress line: the loss
    and reward margin, with the held-out figures at an evaluation's step."""

    every_rank_reports = True

    def __init__(self, cfg: DPOLoopConfig, setup: trl_learner.WorkerSetup, reference: Any, pad: int) -> None:
        super().__init__(cfg, setup)
        self.cfg: DPOLoopConfig = cfg
        self.reference_model, self.pad = reference, pad
        self.heldout = [(r["prompt_ids"], r["chosen_ids"], r["rejected_ids"]) for r in cfg.heldout]
        self.reference: tuple[list[float], list[float]] | None = None

    def logps(self, net: Any) -> tuple[list[float], list[float]]:
        """``net``'s log-probabilities of the held-out chosen and rejected moves."""
        from chessrl.rl.dpo import completion_logps

        chosen = completion_logps(net, [(p, c) for p, c, _ in self.heldout], self.pad)
        rejected = completion_logps(net, [(p, r) for p, _, r in self.heldout], self.pad)
        return chosen, rejected

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        from chessrl.rl.dpo import choice_accuracy

        super().on_train_begin(args, state, control, **kw)
        if self.rank == 0 and self.heldout:
            # the reference's figure; the start's too unless --reference is another model
            self.reference = self.logps(self.reference_model)
            self.start_accuracy = choice_accuracy(*self.reference)

    def measure(self, model: Any) -> dict[str, float]:
        from chessrl.rl.dpo import choice_accuracy, implicit_accuracy

        if not (self.heldout and self.reference is not None):
            return {}
        chosen, rejected = self.logps(model)
        return {
            "heldout_choice_accuracy": choice_accuracy(chosen, rejected) or 0.0,
            "heldout_reward_accuracy": implicit_accuracy(chosen, rejected, *self.reference) or 0.0,
            "reference_heldout_choice_accuracy": self.start_accuracy or 0.0,
        }

    def history_extra(self, step: int) -> dict[str, Any]:
        return {"iteration": step}

    def mlflow_logs(self, logs: dict[str, Any]) -> dict[str, Any]:
        return {k.replace("/", "_"): v for k, v in logs.items()}

    def figures(self, logs: dict[str, Any], metrics: dict[str, float]) -> list[str]:
        figures = []
        if "loss" in logs:
            figures.append(f"loss {float(logs['loss']):.3f}")
        if "rewards/margins" in logs:
            figures.append(f"margin {float(logs['rewards/margins']):+.3f}")
        if "heldout_choice_accuracy" in metrics:
            figures.append(
                f"held-out: {self.cfg.chooser}'s move likelier {metrics['heldout_choice_accuracy']:.1%} "
                f"({self.cfg.reference_name} {metrics['reference_heldout_choice_accuracy']:.1%}), "
                f"reward accuracy {metrics['heldout_reward_accuracy']:.1%}"
            )
        return figures


def model_facts(path: str, key: str) -> dict[str, Any]:
    """A saved causal LM's config (GPT-2-style, as every policy here); anything else is one
    clear error naming ``key``."""
    return gpt2_config(
        path,
        key,
        "GPT2LMHeadModel",
        "dpo trains a GPT-2-style policy (GPT2LMHeadModel), e.g. this run's sft model",
    )


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
    from pipelines.common.artifacts import preference_table

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
        from pipelines.common.artifacts import games_table

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


@dataclass(frozen=True)
class DPOData:
    """What the dpo learner trains and measures on: the training pairs (a materialized Ray dataset
    of token ids, ``train_pairs`` of them; ``left_out`` more of other kinds, too long or
    unreadable), the held-out pairs, and the probe row DPOTrainer reads while it is built."""

    source: Storage
    train: Any
    train_pairs: int
    left_out: int
    held_rows: list[dict[str, Any]]
    probe: dict[str, Any]
    chooser: str = "Stockfish"
    """Who chose the pairs' preferred move (:func:`~pipelines.common.artifacts.pairs_chooser`)."""


def dpo_data(
    context: PhaseContext,
    preferences: tuple[Storage, list[str], list[str], set[str]],
    tokenizer: Any,
    text_format: str,
    max_length: int,
) -> DPOData:
    """The preference pairs tokenized in Ray Data in the policy's ``text_format``: those of the
    kinds asked for that fit the policy's context for training, and the held-out ones (the table's
    held-out files, else its held-out boards)."""
    cfg = context.config.dpo
    source, train_files, held_files, present = preferences
    trl_learner.configure_ray_data()
    split_by_board = not held_files
    stage = {
        "tokenizer": tokenizer,
        "text_format": text_format,
        "kinds": list(cfg.kinds),
        "max_length": max_length,
        "holdout": split_by_board,
    }
    columns, total, kept = trl_learner.tokenized_pairs(
        source, train_files, present, tokenize_pairs, stage, "keep"
    )
    if split_by_board:
        train, held_rows = trl_learner.board_split(kept, cfg.heldout_pairs, ID_COLUMNS)
    else:
        train = kept
        # the training pairs' rules (kinds, rebuildable, fits), applied by the same stage
        rows = read_heldout(source, held_files, cfg.heldout_pairs * 2, context.config.run.seed)
        batch = {c: [r.get(c) for r in rows] for c in columns}
        ids = tokenize_pairs(batch, **{**stage, "holdout": False}) if rows else {"keep": []}
        held_rows = [
            {k: ids[k][i].tolist() for k in ID_COLUMNS} for i, keep in enumerate(ids["keep"]) if keep
        ][: cfg.heldout_pairs]
    train, train_pairs = trl_learner.training_pairs(
        train, ID_COLUMNS, source, cfg, "dpo", f"of the kinds {', '.join(cfg.kinds)} that fit the policy"
    )
    left_out = total - kept.count()
    [probe] = train.take(1)
    probe_row = {k: list(probe[k]) for k in ID_COLUMNS}
    return DPOData(source, train, train_pairs, left_out, held_rows, probe_row, pairs_chooser(source))


def summary_lines(summary: dict[str, Any], quality_nodes: int) -> list[str]:
    """The phase's closing lines (the paired move quality's at ``quality_nodes``)."""
    from chessrl.arena.move_quality import quality_line

    pct = partial(trl_learner.percent, summary)
    return [
        "dpo summary",
        f"  pairs         {summary['train_pairs']:,} training ({', '.join(summary['kinds'])}), "
        f"{summary['heldout_pairs']:,} held out"
        + (f" ({summary['left_out_pairs']:,} left out)" if summary["left_out_pairs"] else ""),
        trl_learner.steps_line(
            summary,
            summary["seconds"],
            f"{summary['loss_type']}, beta {summary['beta']:g}; "
            f"loss {float(summary['loss'] if summary['loss'] is not None else 'nan'):.3f}, "
            f"training reward accuracy {pct('train_reward_accuracy')}",
        ),
        f"  held-out      {summary.get('chooser', 'Stockfish')}'s move the likelier on {pct('heldout_choice_accuracy')} of pairs "
        f"({'start' if summary['reference'] == summary['policy'] else 'reference'}: "
        f"{pct('reference_heldout_choice_accuracy')}); implicit reward accuracy {pct('heldout_reward_accuracy')}",
        *(
            [
                f"  paired        {quality_line(summary['quality'])} (masked argmax, Stockfish {quality_nodes} nodes)"
            ]
            if summary["quality"]
            else []
        ),
        f"  throughput    {float(summary['train_pairs_per_s'] or 0):,.0f} pairs/s",
        f"  model         {summary['model']}",
    ]


def loop_config(context: PhaseContext, policy: str, reference: str, data: DPOData) -> DPOLoopConfig:
    """The learner loop's config (:func:`train_loop_per_worker` reads it as attributes): the
    section's settings, the ``policy`` and its ``reference``, and the held-out pairs and probe row
    of ``data``."""
    cfg = context.config.dpo
    return DPOLoopConfig.from_section(
        context,
        cfg,
        policy=policy,
        reference=reference,
        reference_name="start" if reference == policy else "reference",
        chooser=data.chooser,
        weight_decay=cfg.weight_decay,
        beta=cfg.beta,
        loss_type=cfg.loss_type,
        sft_weight=cfg.sft_weight,
        label_smoothing=cfg.label_smoothing,
        world_size=cfg.num_workers,
        heldout=data.held_rows,
        probe=data.probe,
    )


def run_dpo(context: PhaseContext) -> PhaseResult:
    """Check the inputs, tokenize the pairs (:func:`dpo_data`), train in Ray Train, export the
    policy, measure the start and final policies' move quality, summarise."""
    from chessrl.lm.checkpoints import load_tokenizer
    from chessrl.lm.models import context_length

    cfg = context.config.dpo
    found = check_dpo(context.config, Inputs.of_context(context))
    assert found.preferences is not None and found.text_format is not None  # nothing is taken as given here
    policy, reference, text_format = found.policy, found.reference, found.text_format
    tokenizer = load_tokenizer(policy)
    max_length = context_length(None, policy)
    cpus_per_worker = trl_learner.learner_cpus(cfg)
    data = dpo_data(context, found.preferences, tokenizer, text_format, max_length)
    context.log(
        f"{data.train_pairs:,} training pairs ({', '.join(cfg.kinds)}) and {len(data.held_rows):,} held-out pairs from "
        f"{data.source.uri}"
        + (f" ({data.left_out:,} of other kinds, too long or unreadable left out)" if data.left_out else "")
        + f"; policy {policy} ({text_format} format), reference {'the policy as it starts' if reference == policy else reference}; "
        f"{cfg.loss_type} loss, beta {cfg.beta:g}"
        + (f", sft weight {cfg.sft_weight:g}" if cfg.sft_weight else "")
        + f"; {trl_learner.workers_text(cfg, cpus_per_worker)}"
    )
    config = loop_config(context, policy, reference, data)
    result, seconds = trl_learner.fit_learner(
        context, "dpo", cfg, train_loop_per_worker, config, data.train, cpus_per_worker
    )
    model_out = trl_learner.export_model(
        context, "dpo", result, lambda folder: mark_text_format(folder, text_format)
    )
    metrics = final_metrics(result)
    context.tracking.log_metrics({k.replace("/", "_"): v for k, v in metrics.items()})
    quality: dict[str, Any] = {}
    if cfg.heldout_positions and cfg.quality_nodes:
        context.log(
            f"trained in {seconds:.0f} s; the start and final policies on {cfg.heldout_positions} held-out positions"
        )
        models = {"start": policy, "final": location(model_out)}
        quality = heldout_quality(
            context,
            models,
            text_format,
            games=cfg.games,
            positions=cfg.heldout_positions,
            nodes=cfg.quality_nodes,
        )
    summary = trl_learner.learner_summary(
        {
            "phase": "dpo",
            "policy": policy,
            "reference": reference,
            "text_format": text_format,
            "preferences": data.source.uri,
            "chooser": data.chooser,
            "kinds": list(cfg.kinds),
            "train_pairs": data.train_pairs,
            "heldout_pairs": len(data.held_rows),
            "left_out_pairs": data.left_out,
            "loss_type": cfg.loss_type,
            "beta": cfg.beta,
            "sft_weight": cfg.sft_weight,
        },
        metrics,
        {
            "train_reward_accuracy": metrics.get("rewards/accuracies"),
            "train_reward_margin": metrics.get("rewards/margins"),
            **{k: metrics.get(k) for k in ("heldout_choice_accuracy", "reference_heldout_choice_accuracy")},
            "heldout_reward_accuracy": metrics.get("heldout_reward_accuracy"),
            "train_pairs_per_s": metrics.get("train_pairs_per_s"),
            "quality": quality,
        },
        model_out,
        seconds,
    )
    trl_learner.write_summary(context, "dpo", summary)
    return PhaseResult(summary=summary, lines=summary_lines(summary, cfg.quality_nodes), ok=True)


PHASE = Phase(
    name="dpo",
    section="dpo",
    section_model=DPOConfig,
    run=run_dpo,
    check=check_dpo,
    folder="dpo",
    summary=SUMMARY,
    description=DESCRIPTION,
)
main = PHASE.main
if __name__ == "__main__":
    sys.exit(main())
