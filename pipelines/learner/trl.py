"""The learner skeleton of the phases that train through a TRL ``Trainer`` inside Ray Train
(``sft``, ``reward``, ``dpo``): what each of them did alike, once, so that a phase's worker loop
is its model, its trainer and its held-out measures, and its driver reads check -> data ->
:func:`fit_learner` -> export -> summary.

In a Ray Train worker (the phase's ``train_loop_per_worker``), with the phase's
:class:`TRLLoopConfig` (a frozen dataclass, read as attributes)::

    cfg = RewardLoopConfig.of(loop_config)           # the driver's config, progress and scratch set
    setup = worker_setup(cfg)                        # rank, MLflow (rank 0), device, bf16
    rows = ShardRows(ray.train.get_dataset_shard("train"), cfg.seed, ("chosen_ids", "rejected_ids"))
    args = training_arguments(TrlRewardConfig, cfg, "reward", setup, weight_decay=...)
    trainer = Trainer(model=model, args=args, train_dataset=stream_dataset(rows, rows.columns), ...)
    train_with_trl(trainer, "reward", cfg, setup, MyEval(cfg, setup))   # resume, report, train

where ``MyEval`` is a :class:`LearnerCallback` (``resumed_from_step``, the evaluation cadence,
the log history, MLflow and the driver's progress lines; :class:`PairsEval` for a trainer on
preference pairs). On the driver (:mod:`pipelines.learner.trl_driver`, its names re-exported
here)::

    config = RewardLoopConfig.from_section(context, cfg, base_model=..., ...)
    result, seconds = fit_learner(context, "reward", cfg, train_loop_per_worker, config, train, cpus)
    model_out = export_model(context, "reward", result, edit)
    summary = learner_summary({"phase": "reward", ...}, final_metrics(result), {...}, model_out, seconds)
    write_summary(context, "reward", summary)
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from cluster.progress import report_progress
from pipelines.common.phase import PhaseContext
from pipelines.learner import WorkerConfig, fresh_scratch, resume_folder, training_finished
from pipelines.learner.trl_driver import board_split as board_split
from pipelines.learner.trl_driver import configure_ray_data as configure_ray_data
from pipelines.learner.trl_driver import export_model as export_model
from pipelines.learner.trl_driver import fit_learner as fit_learner
from pipelines.learner.trl_driver import learner_cpus as learner_cpus
from pipelines.learner.trl_driver import learner_summary as learner_summary
from pipelines.learner.trl_driver import percent as percent
from pipelines.learner.trl_driver import steps_line as steps_line
from pipelines.learner.trl_driver import tokenized_pairs as tokenized_pairs
from pipelines.learner.trl_driver import training_pairs as training_pairs
from pipelines.learner.trl_driver import workers_text as workers_text
from pipelines.learner.trl_driver import write_summary as write_summary

T = TypeVar("T", bound="TRLLoopConfig")

#: The training settings every TRL phase's section has, as :class:`TRLLoopConfig` takes them.
SECTION_KEYS: tuple[str, ...] = (
    "max_steps",
    "batch_size",
    "learning_rate",
    "warmup_steps",
    "eval_every",
    "use_gpu",
    "precision",
)


@dataclass(frozen=True, kw_only=True)
class TRLLoopConfig(WorkerConfig):
    """What every TRL learner's workers read (:func:`worker_setup`, :func:`training_arguments`,
    :class:`LearnerCallback`, :func:`train_with_trl`), extended by each phase's (``SftLoopConfig``;
    ``RewardLoopConfig``, ``DPOLoopConfig`` through :class:`PairsLoopConfig`): the driver builds it
    (:meth:`from_section`), :func:`fit_learner` hands it over, the worker's loop takes it back
    (:meth:`~pipelines.learner.WorkerConfig.of`).

    >>> cfg = TRLLoopConfig(max_steps=6, batch_size=4, learning_rate=1e-3, warmup_steps=0, eval_every=3,
    ...                     use_gpu=False, precision="auto", seed=0, tracking_uri=None, tracking_run_id=None)
    >>> TRLLoopConfig.of({**cfg.train_loop_config(), "progress": None, "scratch": "chess-rl-sft-x"}).scratch
    'chess-rl-sft-x'
    """

    max_steps: int
    """Optimizer steps to train (a resumed run goes on to this many in all)."""
    batch_size: int
    """Examples a step on each worker."""
    learning_rate: float
    """The peak learning rate (a cosine schedule after the warm-up)."""
    warmup_steps: int
    """Steps of warm-up before the cosine schedule."""
    eval_every: int
    """Held-out measures and a checkpoint every this many steps (and at the last one)."""
    use_gpu: bool
    """Each worker on its GPU."""
    precision: str
    """auto, fp32 or bf16 (:func:`chessrl.lm.models.resolve_bf16`)."""
    seed: int
    """The run's seed (the shard's local shuffle, the trainer's own)."""
    tracking_uri: str | None
    """MLflow's tracking URI (None: tracking off)."""
    tracking_run_id: str | None
    """The phase's MLflow run the metrics go to."""

    @classmethod
    def from_section(cls: type[T], context: PhaseContext, section: Any, **fields: Any) -> T:
        """The config from the phase's ``section`` (its training settings), the run's seed and the
        phase's MLflow run; ``fields``: the phase's own (they win)."""
        common = {key: getattr(section, key) for key in SECTION_KEYS}
        tracking = {"tracking_uri": context.tracking.uri, "tracking_run_id": context.tracking.run_id}
        return cls(**{**common, "seed": context.config.run.seed, **tracking, **fields})


@dataclass(frozen=True, kw_only=True)
class PairsLoopConfig(TRLLoopConfig):
    """What a TRL learner on preference pairs (reward, dpo) reads beside :class:`TRLLoopConfig`'s
    fields: :class:`PairsEval` and the phase's own trainer arguments."""

    world_size: int
    """The learner's workers (the pairs a second count every worker's)."""
    weight_decay: float
    """AdamW's weight decay."""
    heldout: list[dict[str, Any]]
    """The held-out pairs rank 0 measures, as rows of token ids."""


# ---------------------------------------------------------------------------------------------
# In the Ray Train worker
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerSetup:
    """Where a learner worker runs: its rank, the phase's MLflow run (rank 0; None on the other
    ranks), whether it trains on a GPU, and whether under bf16 autocast."""

    rank: int
    mlflow: Any
    use_gpu: bool
    bf16: bool


def worker_setup(cfg: TRLLoopConfig) -> WorkerSetup:
    """This worker's :class:`WorkerSetup`, from the loop config (``use_gpu``, ``precision`` and
    the phase's MLflow run)."""
    import ray.train
    import torch

    from chessrl.lm.models import resolve_bf16
    from cluster.tracking import RunMetricsLogger

    rank = ray.train.get_context().get_world_rank()
    mlflow = RunMetricsLogger(cfg.tracking_uri, cfg.tracking_run_id) if rank == 0 else None
    use_gpu = bool(cfg.use_gpu)
    if use_gpu and not torch.cuda.is_available():  # a GPU node whose torch cannot use it
        raise RuntimeError(
            f"use_gpu is set but this worker's torch {torch.__version__} sees no CUDA device "
            f"({'a CPU build' if torch.version.cuda is None else 'CUDA ' + torch.version.cuda}): "
            'install the CUDA build of torch on the GPU nodes (docs/cluster.md, "GPUs")'
        )
    return WorkerSetup(rank, mlflow, use_gpu, resolve_bf16(cfg.precision, on_gpu=use_gpu))


def shard_epochs(shard: Any, seed: int) -> Iterator[Any]:
    """The worker's dataset shard pass after pass, without end (``max_steps``, not epochs, decides
    when training ends): each pass its batches of 256 rows as numpy, shuffled locally with the
    seed of its epoch."""
    epoch = 0
    while True:
        yield shard.iter_batches(
            batch_size=256,
            batch_format="numpy",
            local_shuffle_buffer_size=4096,
            local_shuffle_seed=seed + epoch,
        )
        epoch += 1


class ShardRows:
    """For ``ExamplesIterable``: ``(key, row)`` of the shard's rows without end, each of
    ``columns`` as a list. Every worker's shard has the same number of rows and every step takes
    batch_size of them, so the workers reach the end of an epoch (where Ray Data's split waits for
    all of them) at the same step; a shard without rows is an error.

    With ``probe`` (a row), the rows are that one row until :meth:`start`: a trainer that reads an
    example while it is built gets it there, so the Ray shard's first epoch is not started and
    dropped."""

    def __init__(
        self, shard: Any, seed: int, columns: Sequence[str], probe: dict[str, Any] | None = None
    ) -> None:
        self.shard, self.seed, self.columns, self.probe = shard, seed, tuple(columns), probe

    def start(self) -> None:
        """From now on, the shard's rows."""
        self.probe = None

    def __call__(self) -> Iterator[tuple[int, dict[str, Any]]]:
        if self.probe is not None:
            yield 0, self.probe
            return
        for batches in shard_epochs(self.shard, self.seed):
            seen = 0
            for batch in batches:
                for values in zip(*(batch[k] for k in self.columns), strict=True):
                    seen += 1
                    yield seen, {k: v.tolist() for k, v in zip(self.columns, values, strict=True)}
            if not seen:
                raise RuntimeError("this worker's shard of the preference pairs is empty")


def stream_dataset(
    examples: Callable[[], Iterator[tuple[Any, dict[str, Any]]]], int_columns: Sequence[str] = ()
) -> Any:
    """A ``datasets.IterableDataset`` of ``examples()`` (``(key, example)`` pairs).

    ExamplesIterable, not IterableDataset.from_generator: that one fingerprints the generator
    with dill, which disassembles the closure (the Ray shard included) into the worker's log. With
    ``int_columns`` declared (int32 sequences), TRL sees tokenized columns without reading an
    example (reading one would start, then drop, an epoch of the Ray shard)."""
    import datasets
    from datasets.iterable_dataset import ExamplesIterable

    info = None
    if int_columns:
        features = datasets.Features({k: datasets.Sequence(datasets.Value("int32")) for k in int_columns})
        info = datasets.DatasetInfo(features=features)
    return datasets.IterableDataset(ExamplesIterable(examples, {}), info=info)


class OwnShardLoader:
    """Mixin for a TRL trainer (before it in the bases): it reads this worker's own shard as is;
    accelerate would otherwise keep every num_workers-th batch of it (its split of an unsharded
    iterable dataset)."""

    def get_train_dataloader(self) -> Any:
        from torch.utils.data import DataLoader

        return DataLoader(
            self.train_dataset,  # type: ignore[attr-defined]
            batch_size=self._train_batch_size,  # type: ignore[attr-defined]
            collate_fn=self.data_collator,  # type: ignore[attr-defined]
            num_workers=0,
        )


def logging_divisor(eval_every: int) -> int:
    """The most steps, up to 10, between two logs of the loss that divide ``eval_every``: the loss
    is logged at every evaluation's step."""
    return max(d for d in range(1, 11) if eval_every % d == 0)


def training_arguments(
    args_class: type, cfg: TRLLoopConfig, phase: str, setup: WorkerSetup, **fields: Any
) -> Any:
    """``args_class`` (the TRL config of the phase's trainer) with what every phase sets alike:
    ``max_steps`` steps of ``batch_size`` examples a worker, a cosine schedule after
    ``warmup_steps``, a checkpoint every ``eval_every`` steps, the worker's device and bf16, no
    reporting or tqdm of transformers' own, no dataloader workers; ``fields``: the phase's own.
    The trainer writes its checkpoints into a folder of the temporary folder, named for the run
    and the worker's rank (``cfg.scratch``: a re-run after a kill starts by removing what the
    killed one left), that keeps only the latest (Ray Train's report callback has copied each to
    storage by then) and that :func:`train_with_trl` removes."""
    output_dir = fresh_scratch(f"{cfg.scratch or 'chess-rl-' + phase}-rank{setup.rank}")
    return args_class(
        output_dir=str(output_dir),
        save_total_limit=1,
        max_steps=cfg.max_steps,
        per_device_train_batch_size=cfg.batch_size,
        learning_rate=cfg.learning_rate,
        lr_scheduler_type="cosine",
        warmup_steps=cfg.warmup_steps,
        save_strategy="steps",
        save_steps=cfg.eval_every,
        report_to="none",
        use_cpu=not setup.use_gpu,
        bf16=setup.bf16,
        dataloader_num_workers=0,
        seed=cfg.seed,
        disable_tqdm=True,
        ddp_find_unused_parameters=False,  # every GPT-2 parameter is used: skip DDP's extra graph walk
        **fields,
    )


class LearnerCallback:
    """What every TRL learner reports alike, as the trainer callback :func:`train_with_trl`
    installs: ``resumed_from_step`` into the log history when training begins (0 for a fresh
    run; the checkpoint's step when a re-run resumed, the trainer's state restored), the
    evaluation cadence (:meth:`eval_due`), measures into the log history (Ray Train's reported
    metrics) and the phase's MLflow run (:meth:`record`), progress lines to the driver's board
    (:meth:`report`). A phase overrides :meth:`on_step_end` and :meth:`on_log` with its own."""

    def __init__(self, cfg: TRLLoopConfig, setup: WorkerSetup) -> None:
        self.cfg = cfg
        self.rank, self.mlflow = setup.rank, setup.mlflow
        self.start_step = 0

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        state.log_history.append({"resumed_from_step": state.global_step})
        self.start_step = state.global_step

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        """After each optimizer step: nothing here."""

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any
    ) -> None:
        """At each of the trainer's logs: nothing here."""

    def eval_due(self, state: Any) -> bool:
        """Whether this step is an evaluation's: every ``eval_every`` steps, and the last."""
        return state.global_step % self.cfg.eval_every == 0 or state.global_step >= state.max_steps

    def record(self, state: Any, metrics: dict[str, Any], **extra: Any) -> None:
        """``metrics`` of this step into the log history (with ``step`` and ``extra``) and MLflow."""
        state.log_history.append({**metrics, "step": state.global_step, **extra})
        if self.mlflow is not None:
            self.mlflow.log(metrics, step=state.global_step)

    def report(self, state: Any, figures: str, *, show: bool = False) -> None:
        """A report to the driver's progress board (``show``: a line now)."""
        report_progress(self.cfg.progress, state.global_step, figures, start=self.start_step, show=show)


class PairsEval(LearnerCallback):
    """Held-out measures of a trainer on preference pairs every ``eval_every`` steps on rank 0
    (:meth:`measure`), with the training pairs a second (training time only), into the log
    history, MLflow and one progress line: the logged figures with the held-out ones at an
    evaluation's step (:meth:`figures`)."""

    #: Progress lines from every rank's logs, not rank 0's alone.
    every_rank_reports = False

    def __init__(self, cfg: PairsLoopConfig, setup: WorkerSetup) -> None:
        super().__init__(cfg, setup)
        self.cfg: PairsLoopConfig = cfg
        self.started = time.perf_counter()
        self.pending: dict[str, float] = {}

    def measure(self, model: Any) -> dict[str, float]:
        """The held-out measures of ``model`` (rank 0, at an evaluation's step)."""
        raise NotImplementedError

    def figures(self, logs: dict[str, Any], metrics: dict[str, float]) -> list[str]:
        """A progress line's figures: from the trainer's ``logs`` and the held-out ``metrics``."""
        raise NotImplementedError

    def final_measures(self, model: Any) -> dict[str, float]:
        """More measures of the final model (rank 0, at the last step), beside :meth:`measure`'s."""
        return {}

    def history_extra(self, step: int) -> dict[str, Any]:
        """More keys of an evaluation's entry in the log history."""
        return {}

    def mlflow_logs(self, logs: dict[str, Any]) -> dict[str, Any]:
        """The trainer's logs as they go to MLflow."""
        return logs

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        step = state.global_step
        if self.rank != 0 or not self.eval_due(state):
            return
        now = time.perf_counter()
        metrics = self.measure(kw["model"])
        if step >= state.max_steps:
            metrics.update(self.final_measures(kw["model"]))
        metrics["heldout_eval_s"] = time.perf_counter() - now
        done = max(1, step - self.start_step)
        metrics["train_pairs_per_s"] = (
            done * self.cfg.batch_size * self.cfg.world_size / max(1e-9, now - self.started)
        )
        self.started += metrics["heldout_eval_s"]  # the rate counts training time only
        self.record(state, metrics, **self.history_extra(step))
        self.pending = metrics
        if step % args.logging_steps != 0:  # no loss is logged at this step
            self.progress(state, {})

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any
    ) -> None:
        if logs and self.mlflow is not None:
            self.mlflow.log(self.mlflow_logs(logs), step=state.global_step)
        if logs and "loss" in logs:
            self.progress(state, logs)

    def progress(self, state: Any, logs: dict[str, Any]) -> None:
        """A driver progress line: the logged figures, with the held-out ones at an evaluation's step."""
        if self.rank != 0 and not self.every_rank_reports:
            return
        metrics, self.pending = self.pending, {}
        self.report(state, ", ".join(self.figures(logs, metrics)), show=bool(metrics))


def trainer_callback(hooks: LearnerCallback) -> Any:
    """``hooks`` as a transformers ``TrainerCallback`` (transformers is imported in the worker
    only)."""
    from transformers import TrainerCallback

    class Hooks(TrainerCallback):  # type: ignore[misc]
        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            hooks.on_train_begin(args, state, control, **kw)

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            hooks.on_step_end(args, state, control, **kw)

        def on_log(
            self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any
        ) -> None:
            hooks.on_log(args, state, control, logs=logs, **kw)

    return Hooks()


def train_with_trl(
    trainer: Any,
    phase: str,
    cfg: TRLLoopConfig,
    setup: WorkerSetup,
    callback: LearnerCallback,
    note: str = "",
) -> None:
    """Train ``trainer`` in this Ray Train worker as every TRL phase does: a line on the worker's
    device, bf16, threads and ``note``; transformers' PrinterCallback out (its metric dicts: the
    driver prints progress lines instead), ``callback`` and Ray's report callback (a Ray Train
    checkpoint at each save) in; then resume from Ray Train's latest checkpoint, or train nothing
    when that checkpoint is already the last step (a run killed after its last checkpoint)."""
    import torch
    from ray.train.huggingface.transformers import RayTrainReportCallback, prepare_trainer
    from transformers.trainer_callback import PrinterCallback

    print(
        f"[{phase}] worker {setup.rank}: {'cuda' if setup.use_gpu else 'cpu'}, "
        f"{'bf16 autocast' if setup.bf16 else 'fp32'}, {torch.get_num_threads()} torch threads{note}",
        flush=True,
    )
    trainer.remove_callback(PrinterCallback)
    trainer.add_callback(trainer_callback(callback))
    trainer.add_callback(RayTrainReportCallback())
    trainer = prepare_trainer(trainer)
    try:
        resume = resume_folder(phase, into=trainer.args.output_dir)
        if not training_finished(resume, cfg.max_steps, phase):
            trainer.train(resume_from_checkpoint=resume)
    finally:  # the checkpoints are Ray Train's now: the trainer's own folder goes
        shutil.rmtree(trainer.args.output_dir, ignore_errors=True)
