"""The driver's half of the TRL learner skeleton (:mod:`pipelines.learner.trl` holds the
worker's): what the ``sft``, ``reward`` and ``dpo`` drivers do alike around their learner. Ray
Data set up for a learner's input (:func:`configure_ray_data`), the preference table's pairs
tokenized and split (:func:`tokenized_pairs`, :func:`board_split`, :func:`training_pairs`), the
learner's CPUs (:func:`learner_cpus`, :func:`workers_text`), the fit under a progress board
(:func:`fit_learner`), the export of its model (:func:`export_model`), and the summary
(:func:`learner_summary`, :func:`write_summary`, :func:`steps_line`, :func:`percent`).
:mod:`pipelines.learner.trl` re-exports every name here (the phases call them through it)::

    configure_ray_data()
    config = RewardLoopConfig.from_section(context, cfg, base_model=..., ...)
    result, seconds = fit_learner(context, "reward", cfg, train_loop_per_worker, config, train, cpus)
    model_out = export_model(context, "reward", result, edit)
    summary = learner_summary({"phase": "reward", ...}, final_metrics(result), {...}, model_out, seconds)
    write_summary(context, "reward", summary)
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from cluster.errors import InputDataError
from cluster.progress import ProgressBoard
from cluster.storage import Storage
from pipelines.common.phase import PhaseContext
from pipelines.learner import default_cpus_per_worker, export_hf_checkpoint, torch_trainer

if TYPE_CHECKING:
    from pipelines.learner.trl import TRLLoopConfig


def configure_ray_data() -> None:
    """Ray Data for a learner's input, set in the driver before its dataset is built: blocks in
    order (``preserve_order``: without it a map's blocks come out in the order its tasks finish,
    which the machine's load decides, so the same seed would train on another order, and the
    Train ingest inherits the setting), progress bars on a terminal only, and no line as each
    execution starts."""
    import sys

    import ray.data

    data_context = ray.data.DataContext.get_current()
    data_context.execution_options.preserve_order = True
    data_context.enable_progress_bars = sys.stderr.isatty()
    data_context.print_on_execution_start = False


def learner_cpus(cfg: Any) -> float:
    """The CPUs of a learner worker: the section's ``cpus_per_worker``, else the cluster's split
    (with ``use_gpu``: the CPUs that come with a GPU on the GPU nodes, :func:`default_cpus_per_worker`)."""
    return cfg.cpus_per_worker or default_cpus_per_worker(cfg.num_workers, cfg.use_gpu)


def workers_text(cfg: Any, cpus_per_worker: float) -> str:
    """The learner's workers, as the phase's log line says them."""
    return f"{cfg.num_workers} worker(s) x {cpus_per_worker} CPU" + (" + 1 GPU" if cfg.use_gpu else "")


def fit_learner(
    context: PhaseContext,
    phase: str,
    cfg: Any,
    loop: Callable[[dict[str, Any]], None],
    config: TRLLoopConfig,
    train: Any,
    cpus_per_worker: float,
    folder: str | None = None,
) -> tuple[Any, float]:
    """Run the phase's learner ``loop`` on ``config`` (``cfg.num_workers`` workers of
    ``cpus_per_worker`` CPUs, a GPU each with ``cfg.use_gpu``, ``train`` their dataset) under a
    progress board of ``cfg.max_steps`` steps, checkpoints under the run's ``folder`` (default:
    ``phase``), where a re-run resumes; its result, which has a checkpoint, and the seconds it took."""
    trainer = torch_trainer(
        context,
        folder or phase,
        loop,
        config.train_loop_config(),
        num_workers=cfg.num_workers,
        cpus_per_worker=cpus_per_worker,
        use_gpu=cfg.use_gpu,
        datasets={"train": train},
        progress=(board := ProgressBoard(context.log, "step", cfg.max_steps)),
    )
    started = time.perf_counter()
    with board:
        result = trainer.fit()
    seconds = time.perf_counter() - started
    if result.checkpoint is None:
        raise RuntimeError(f"{phase} finished without a checkpoint")
    return result, seconds


def export_model(
    context: PhaseContext, folder: str, result: Any, edit: Callable[[Any], None] | None = None
) -> Storage:
    """The learner's last checkpoint saved as the phase's model, ``<run>/<folder>/model``, without
    the training state (:func:`pipelines.learner.export_hf_checkpoint`; ``edit`` may change its
    files first); its storage."""
    from ray.train.huggingface.transformers import RayTrainReportCallback

    model_out = context.phase_storage(folder).child("model")
    export_hf_checkpoint(result.checkpoint, model_out, edit, subfolder=RayTrainReportCallback.CHECKPOINT_NAME)
    return model_out


def learner_summary(
    head: dict[str, Any], metrics: dict[str, Any], tail: dict[str, Any], model_out: Storage, seconds: float
) -> dict[str, Any]:
    """A TRL phase's summary, in this order: ``head`` (what it read), the steps trained, the step a
    re-run resumed from and the last logged loss (of the learner's final ``metrics``), ``tail``
    (its measures), the model's location and the seconds of training."""
    return {
        **head,
        "steps": int(metrics.get("step", 0)),
        "resumed_from_step": int(metrics.get("resumed_from_step", 0)),
        "loss": metrics.get("loss"),
        **tail,
        "model": model_out.uri,
        "seconds": round(seconds, 1),
    }


def write_summary(context: PhaseContext, folder: str, summary: dict[str, Any]) -> None:
    """``summary.json`` in the run's ``folder``."""
    context.phase_storage(folder).write_text("summary.json", json.dumps(summary, indent=2, sort_keys=True))


def steps_line(summary: dict[str, Any], seconds: float, figures: str) -> str:
    """The summary's steps line: the steps in ``seconds`` with ``figures``, and where a re-run resumed."""
    return f"  steps         {summary['steps']} in {seconds:.0f} s ({figures})" + (
        f", resumed from step {summary['resumed_from_step']}" if summary["resumed_from_step"] else ""
    )


def tokenized_pairs(
    source: Storage,
    files: Sequence[str],
    present: set[str],
    stage: Callable[..., Any],
    kwargs: dict[str, Any],
    keep: str,
) -> tuple[list[str], int, Any]:
    """The preference table's training ``files`` through the phase's tokenizing ``stage`` in Ray
    Data (materialized): the columns read (the required ones, and ``fen`` and ``kind`` where the
    table has them), how many pairs were read, and the pairs whose ``keep`` flag is set."""
    import ray.data
    from ray.data.expressions import col

    from chessrl.rl.preferences import REQUIRED_COLUMNS

    columns = [*REQUIRED_COLUMNS, *(c for c in ("fen", "kind") if c in present)]
    tokenized = (
        ray.data.read_parquet([source.path(f) for f in files], filesystem=source.fs)
        .select_columns(columns)
        .map_batches(stage, fn_kwargs=kwargs, batch_size=512, batch_format="numpy")
        .materialize()
    )
    return columns, tokenized.count(), tokenized.filter(expr=col(keep))


def board_split(
    kept: Any, limit: int, id_columns: Sequence[str], more: Sequence[str] = ()
) -> tuple[Any, list[dict[str, Any]]]:
    """A table without a held-out split: its pairs of held-out boards (``held``), up to ``limit``
    of them as rows (the ``id_columns`` as lists, and ``more``), and the others for training."""
    from ray.data.expressions import col

    held = [
        {**{k: list(r[k]) for k in id_columns}, **{k: r[k] for k in more}}
        for r in kept.filter(expr=col("held")).take(limit)
    ]
    return kept.filter(expr=~col("held")), held


def training_pairs(
    train: Any, id_columns: Sequence[str], source: Storage, cfg: Any, phase: str, which: str
) -> tuple[Any, int]:
    """The training pairs' ``id_columns``, materialized here (the trainer's workers may take every
    CPU, leaving none for Ray Data tasks), and how many there are; fewer than one step of
    ``cfg.batch_size`` pairs for each of ``cfg.num_workers`` workers is one clear error, which
    says the pairs as ``which``."""
    train = train.select_columns(list(id_columns)).materialize()
    count = train.count()
    if count < cfg.batch_size * cfg.num_workers:
        raise InputDataError(
            f"{source.uri} has {count} training pairs {which}: fewer than one step "
            f"({phase}.batch_size {cfg.batch_size} x {cfg.num_workers} worker(s)); make more with "
            "`chess-rl preferences --positions N`, or lower --batch-size"
        )
    return train, count


def percent(summary: dict[str, Any], key: str) -> str:
    """A summary's share as a percentage, ``n/a`` where it has none.

    >>> percent({"accuracy": 0.4567, "spearman": None}, "accuracy"), percent({"spearman": None}, "spearman")
    ('45.7%', 'n/a')
    """
    value = summary.get(key)
    return "n/a" if value is None else f"{float(value):.1%}"
