"""The learner of every training phase, in one place: the Ray Train ``TorchTrainer`` every phase
builds the same way (scaling, storage and resume by ``(storage_path, name)``, the checkpoint to
resume from, the export of a Hugging Face checkpoint as the phase's model), the metrics log and
the rollout feed, here; the two halves of the skeleton and each phase's worker loop beside it:

- :mod:`pipelines.learner.trl`: the skeleton of the phases that train through a TRL ``Trainer``
  (sft, reward, dpo): ``TRLLoopConfig`` (the frozen config a driver hands its workers, read as
  attributes), worker setup, shard streaming, shared arguments, the callback, ``train_with_trl``;
  on the driver (re-exported from :mod:`pipelines.learner.trl_driver`) ``fit_learner``, export
  and the summary.
- :mod:`pipelines.learner.trl_driver`: the driver's half of that skeleton: Ray Data for the
  learner's input, the preference pairs tokenized and split, the learner's CPUs, ``fit_learner``,
  ``export_model`` and the summary.
- :mod:`pipelines.learner.loop`: the skeleton of hand-written loops (ppo, grpo, selfplay):
  ``LoopConfig`` (the frozen config a driver hands its workers, read as attributes),
  ``LoopLearner`` (state, resume, time limit, reports, checkpoint cadence, finish), ``fit_then_stop``.
- :mod:`pipelines.learner.reward_model`: the reward model on a GPT-2 transformer (reward's
  learner trains it; ppo's critic starts from it when Stockfish grades).
- :mod:`pipelines.learner.quality`: the start and final policies' paired move quality (ppo, dpo).
- :mod:`pipelines.learner.sft`, :mod:`pipelines.learner.ppo`, :mod:`pipelines.learner.grpo`,
  :mod:`pipelines.learner.selfplay`: those phases' ``train_loop_per_worker`` (reward's and dpo's
  are short enough to stay in their phase modules).

Nothing here is a phase: phase modules import it, never each other. Every learner's config
crosses to its workers as a :class:`WorkerConfig` (a frozen dataclass, read as attributes).

    trainer = torch_trainer(context, "reward", train_loop_per_worker, config.train_loop_config(),
                            num_workers=2, cpus_per_worker=1, use_gpu=False, datasets={"train": ds})
    result = trainer.fit()   # a re-run of the same command resumes from the last checkpoint
    export_hf_checkpoint(result.checkpoint, context.phase_storage("reward").child("model"))
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from cluster.errors import ConfigError
from cluster.progress import ProgressBoard
from cluster.storage import Storage
from pipelines.common.phase import PhaseContext

#: Files of a transformers Trainer checkpoint that belong to training, not to the model.
TRAINING_STATE_PREFIXES: tuple[str, ...] = ("optimizer", "scheduler", "rng_state", "training_args")

W = TypeVar("W", bound="WorkerConfig")


@dataclass(frozen=True, kw_only=True)
class WorkerConfig:
    """What every learner's driver hands its Ray Train workers, frozen, read as attributes: each
    learner's config extends it (:class:`pipelines.learner.loop.LoopConfig` for the hand-written
    loops, :class:`pipelines.learner.trl.TRLLoopConfig` for the TRL trainers). Ray Train takes a
    dict: the driver gives it :meth:`train_loop_config` (the config under ``config``),
    :func:`torch_trainer` adds the progress board's handle and the scratch name beside it, and the
    worker's loop takes the config back with :meth:`of`, those two set.

    >>> cfg = WorkerConfig()
    >>> WorkerConfig.of({**cfg.train_loop_config(), "progress": "board", "scratch": "chess-rl-x"})
    WorkerConfig(progress='board', scratch='chess-rl-x')
    """

    progress: Any = None
    """The driver's progress board's handle (:func:`cluster.progress.report_progress`; None:
    none): :meth:`of` sets it from what ``torch_trainer`` adds."""
    scratch: str | None = None
    """The name of the run's local scratch folders (:func:`scratch_name`; None: none given):
    :meth:`of` sets it from what ``torch_trainer`` adds."""

    def train_loop_config(self) -> dict[str, Any]:
        """Ray Train's ``train_loop_config`` for this config (it takes a dict): the config under
        ``config``."""
        return {"config": self}

    @classmethod
    def of(cls: type[W], loop_config: dict[str, Any]) -> W:
        """In the worker: the config a driver put in ``loop_config`` (:meth:`train_loop_config`),
        with the progress board's handle and the scratch name ``torch_trainer`` added beside it;
        a config of another class is a TypeError."""
        config = loop_config["config"]
        if not isinstance(config, cls):
            raise TypeError(f"the loop config holds a {type(config).__name__}, not a {cls.__name__}")
        added = {key: loop_config.get(key) for key in ("progress", "scratch")}
        return dataclasses.replace(config, **added)


def cpus_that_fit(free: Sequence[float], workers: int, cap: float) -> float:
    """The most CPUs each of ``workers`` learner workers can ask for (at most ``cap``) so that
    they all fit on nodes with ``free`` CPUs each (a worker cannot span nodes); 0 if none does.

    >>> cpus_that_fit([1.5, 2.5], 2, 2.0)      # 2 each would put both on the larger node: no room
    1.5
    >>> cpus_that_fit([4.0], 2, 4.0)
    2.0
    """
    best = 0.0
    for f in free:
        for k in range(1, workers + 1):
            c = min(f / k, cap)
            if c > best and sum(int(x / c + 1e-9) for x in free) >= workers:
                best = c
    return best


def check_gpus(
    phase: str,
    num_workers: float,
    key: str | None = None,
    what: str | None = None,
    log: Callable[[str], None] | None = None,
) -> None:
    """A learner that asks for a GPU a worker must find them in the cluster, now or once its
    autoscaler has started the nodes of a GPU type (:func:`cluster.capacity.ensure` asks for them
    and waits, its progress lines in ``log``): Ray Train would otherwise wait for them forever,
    its controller retrying each minute. GPUs no set of nodes can hold are one ConfigError saying
    what the cluster has (and can start) and which torch the driver runs. ``key`` and ``what``
    name another ask (an actor's GPUs: ``ppo.reward_server_gpus``, "the 2 reward server(s)"),
    ``num_workers`` then the GPUs it needs in all: a fraction (4 samplers at 0.25) shares whole
    GPUs, so the autoscaler is asked for the whole GPUs that hold it."""
    from cluster.capacity import ensure, read_capacity

    cap = read_capacity()
    gpus = cap.most("GPU")
    if gpus >= num_workers:
        if cap.autoscales:
            whole = math.ceil(num_workers - 1e-9)
            ensure([{"GPU": 1.0}] * whole, what=key or f"{phase}.use_gpu", log=log, capacity=cap)
        return
    gpus_said = f"can hold at most {gpus:g} ({cap.describe()})" if cap.autoscales else f"has {gpus:g}"
    try:
        import torch

        build = f"torch {torch.__version__} here is " + (
            f"a CUDA {torch.version.cuda} build" if torch.version.cuda else "the CPU build"
        )
    except ImportError:  # a driver without torch: say nothing of it
        build = "no torch here"
    asked = key or f"{phase}.use_gpu (--use-gpu)"
    needs = what or f"the learner's {num_workers} worker(s) need a GPU each"
    raise ConfigError(
        f"{asked}: {needs}, but this Ray cluster {gpus_said} ({build}): "
        + ("leave use_gpu off" if key is None else "set it to 0")
        + ", or start Ray on GPU "
        'machines with the CUDA build of torch (docs/cluster.md, "GPUs")'
    )


def default_cpus_per_worker(num_workers: int, use_gpu: bool = False) -> int:
    """The CPUs of a learner worker its section does not size
    (:meth:`cluster.capacity.Capacity.worker_cpus`): with ``use_gpu``, the CPUs that come with a GPU
    on the nodes (or node types) that carry GPUs; else the CPUs the cluster sizes a phase to (the
    alive nodes', or the first node its autoscaler would start) split among the workers, no more
    than the largest node has.

        default_cpus_per_worker(4, use_gpu=True)   # 8 where the GPU node type is 8 CPUs + 1 GPU
    """
    from cluster.capacity import read_capacity

    return read_capacity().worker_cpus(num_workers, use_gpu)


def quiet_ray_train() -> None:
    """Ray Train settings for every learner, set in the driver's environment (Ray Train passes
    both on to its controller and workers); a user's own value wins.

    - ``RAY_TRAIN_ENABLE_PRINT_PATCH=0``: Ray Train patches print() in its workers to tee each
      line to the console *and* to its logger, which prints it again: every worker line showed
      twice.
    - ``RAY_TRAIN_ENABLE_PREEMPTION_WATCHER=0``: the watcher only hands drain signals to a loop
      that asks for them (ours checkpoint and resume instead), and it logged a core_worker error
      line in every learner phase (its constructor's arguments in the object store with
      max_restarts, ray#53727).
    """
    os.environ.setdefault("RAY_TRAIN_ENABLE_PRINT_PATCH", "0")
    os.environ.setdefault("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "0")


def torch_trainer(
    context: PhaseContext,
    phase: str,
    loop: Callable[[dict[str, Any]], None],
    loop_config: dict[str, Any],
    *,
    num_workers: int,
    cpus_per_worker: float,
    use_gpu: bool,
    folder: str | None = None,
    datasets: dict[str, Any] | None = None,
    dataset_config: Any = None,
    progress: ProgressBoard | None = None,
) -> Any:
    """A ``TorchTrainer`` whose checkpoints live under ``<storage>/<run>/<phase>/ray``: running
    the same phase again (same run name and storage) finds them and resumes. ``loop_config`` is
    the learner's :meth:`WorkerConfig.train_loop_config`; beside its config go the board's handle,
    with ``progress`` (None without one), for :func:`cluster.progress.report_progress` in the loop,
    and the name of the run's local scratch folders (:func:`pipelines.learner.trl.training_arguments`):
    :meth:`WorkerConfig.of` reads them back into the config's ``progress`` and ``scratch``."""
    from ray.train import LoggingConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    from cluster.capacity import ensure, read_capacity

    cap = read_capacity()
    # a GPU worker fits only on a node with a GPU: those nodes' CPUs bound it (when there are any;
    # GPUs no node has are check_gpus's line)
    largest = (use_gpu and cap.largest("CPU", beside="GPU")) or cap.largest("CPU") or 1.0
    if cpus_per_worker > largest:  # Ray Train would wait for such a node forever, retrying each minute
        nodes = "node with a GPU" if use_gpu and cap.largest("CPU", beside="GPU") else "node"
        raise ConfigError(
            f"{phase}: a learner worker of {cpus_per_worker:g} CPUs fits on no {nodes} of this cluster "
            f"(the largest has {largest:g}"
            + (f"; {cap.describe()}" if cap.autoscales else "")
            + f"): lower {phase}.cpus_per_worker (unset, it is sized to the node) or add larger nodes"
        )
    if use_gpu:
        check_gpus(phase, num_workers, log=context.log)
    # on a cluster that autoscales, the nodes for the workers are asked for (and waited for, with
    # progress lines) here; Ray Train's own placement group would wait for them silently
    worker = {"CPU": float(cpus_per_worker), **({"GPU": 1.0} if use_gpu else {})}
    ensure(
        [worker] * num_workers,
        what=f"{phase}'s {num_workers} learner worker(s)",
        log=context.log,
        capacity=cap,
    )
    folder = folder or phase
    ray_storage = context.phase_storage(folder).child("ray")
    ray_storage.makedirs()
    quiet_ray_train()
    scratch = scratch_name(folder, ray_storage)  # a TRL trainer's own checkpoints
    timeout_s = collective_timeout_s(loop_config)
    return TorchTrainer(
        loop,
        torch_config=TorchConfig(timeout_s=timeout_s) if timeout_s is not None else None,
        train_loop_config={
            **loop_config,
            "progress": progress.handle if progress is not None else None,
            "scratch": scratch,
        },
        scaling_config=ScalingConfig(
            num_workers=num_workers, use_gpu=use_gpu, resources_per_worker={"CPU": cpus_per_worker}
        ),
        datasets=datasets or {},
        **({"dataset_config": dataset_config} if dataset_config is not None else {}),
        run_config=RunConfig(
            name=f"{context.config.run.name}-{folder}",
            storage_path=ray_storage.root if ray_storage.is_local else ray_storage.path(),
            storage_filesystem=None if ray_storage.is_local else ray_storage.fs,
            callbacks=list(context.train_callbacks) or None,
            # the controller's INFO lines (resources requested, worker group started) stay in
            # Ray Train's log files; the driver says what matters
            logging_config=LoggingConfig(log_level="WARNING"),
        ),
    )


#: torch's (and Ray Train's ``TorchConfig``) process-group timeout, seconds.
DEFAULT_COLLECTIVE_TIMEOUT_S = 1800


def collective_timeout_s(loop_config: dict[str, Any]) -> int | None:
    """The torch process group's timeout for a learner loop whose other ranks wait in a
    collective while rank 0 alone works (ppo's lead reads an iteration's rollouts, selfplay's
    plays the gate games): such a wait lasts up to the phase's time limit, so the timeout is the
    limit plus the default 1,800 s (rank 0's work after it: one iteration's gate, a checkpoint),
    and a day without a limit (a slow collector is not a lost process; a failed one is raised on
    rank 0, and Ray Train ends the others). None (``TorchConfig``'s 1,800 s) for a loop without a
    :class:`~pipelines.learner.loop.LoopConfig` (the TRL learners, sft, reward and dpo: every rank works).

    >>> from types import SimpleNamespace
    >>> [collective_timeout_s({"config": SimpleNamespace(time_limit_s=t)}) for t in (3600.0, None)]
    [5400, 86400]
    >>> collective_timeout_s({"model": "tiny"}) is None
    True
    """
    config = loop_config.get("config")
    if not hasattr(config, "time_limit_s"):
        return None
    limit = config.time_limit_s
    return 86400 if limit is None else int(limit) + DEFAULT_COLLECTIVE_TIMEOUT_S


def scratch_name(kind: str, storage: Storage) -> str:
    """The name of a local scratch folder of the run writing to ``storage``: one name per run, so
    that a re-run after a kill starts by removing what the killed one left (:func:`fresh_scratch`).

    >>> scratch_name("sft", Storage.from_uri("/runs/demo/sft/ray"))
    'chess-rl-sft-...'
    """
    return f"chess-rl-{kind}-{hashlib.sha1(storage.uri.encode()).hexdigest()[:10]}"


def fresh_scratch(name: str) -> Path:
    """The folder ``name`` in the temporary folder, empty: what an earlier (killed) run left
    there is removed. Its owner removes it when done."""
    folder = Path(tempfile.gettempdir()) / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


@contextlib.contextmanager
def read_checkpoint(checkpoint: Any) -> Iterator[str]:
    """A Ray Train checkpoint's files in a local folder this process alone reads, for the
    ``with`` block: a local checkpoint's own folder, a remote one's download into a temporary
    folder removed after it.

    Ray's ``Checkpoint.as_directory`` downloads a remote checkpoint into one folder per checkpoint
    shared by every process of the machine, and a process that comes after another's download has
    ended downloads it again over the files the other is reading (Ray 2.x's ``to_directory`` tries
    its lock once and, finding it free, copies): two Ray Train workers resuming from S3 on one
    machine read a half-written ``learner.pt`` ("PytorchStreamReader failed reading file").

        with read_checkpoint(ray.train.get_checkpoint()) as folder:
            saved = torch.load(os.path.join(folder, "learner.pt"))
    """
    import pyarrow.fs

    if isinstance(checkpoint.filesystem, pyarrow.fs.LocalFileSystem):
        yield checkpoint.path
        return
    with tempfile.TemporaryDirectory(prefix="chess-rl-checkpoint-") as folder:
        yield checkpoint.to_directory(folder)


def export_hf_checkpoint(
    checkpoint: Any,
    out: Storage,
    edit: Callable[[Path], None] | None = None,
    *,
    subfolder: str = "checkpoint",
) -> None:
    """Copy the model files of a Ray Train checkpoint written by ``RayTrainReportCallback`` (a
    transformers checkpoint in ``subfolder``) to ``out``, without the optimizer and scheduler
    state; the tokenizer config points at the generic fast class (see
    :func:`chessrl.lm.checkpoints.make_tokenizer_config_generic`). ``edit(folder)`` may change the files
    first (e.g. add fields to ``config.json``)."""
    from chessrl.lm.checkpoints import make_tokenizer_config_generic

    with read_checkpoint(checkpoint) as folder:
        hf = Path(folder) / subfolder
        make_tokenizer_config_generic(hf)
        if edit is not None:
            edit(hf)
        for path in sorted(hf.iterdir()):
            if path.is_file() and not path.name.startswith(TRAINING_STATE_PREFIXES):
                out.upload_file(path, path.name)


def resume_folder(phase: str, into: str, subfolder: str = "checkpoint") -> str | None:
    """In a Ray Train worker: a local copy, in the folder ``into`` (the trainer's own, removed
    with it), of the transformers checkpoint inside Ray Train's latest checkpoint
    (``RayTrainReportCallback`` writes it to ``subfolder``), for
    ``Trainer.train(resume_from_checkpoint=...)``; None on a fresh start."""
    import json
    import shutil

    import ray.train

    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        return None
    with read_checkpoint(checkpoint) as folder:
        resume = str(Path(into) / f"resume-{subfolder}")
        shutil.copytree(Path(folder) / subfolder, resume)
    state = json.loads(Path(resume, "trainer_state.json").read_text())
    print(f"[{phase}] resuming from the checkpoint of step {state['global_step']}", flush=True)
    return resume


def training_finished(resume: str | None, max_steps: int, phase: str | None = None) -> bool:
    """Whether the transformers checkpoint at ``resume`` (:func:`resume_folder`) has already
    reached this run's ``max_steps``. A run killed after its last checkpoint and before its
    summary finds one; ``Trainer.train`` would otherwise train a step past the end, so the learner
    loops skip it (saying so as ``phase``) and the driver exports that checkpoint as it is. (The same command with more
    steps goes on training: the comparison is with the steps asked now, not the checkpoint's own.)

    >>> import json, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> _ = Path(folder, "trainer_state.json").write_text(json.dumps({"global_step": 6, "max_steps": 6}))
    >>> training_finished(folder, 6), training_finished(folder, 9), training_finished(None, 6)
    (True, False, False)
    """
    if resume is None:
        return False
    state = json.loads(Path(resume, "trainer_state.json").read_text())
    if int(state["global_step"]) < max_steps:
        return False
    if phase:
        print(
            f"[{phase}] the checkpoint of step {state['global_step']} is the last one: nothing left to train",
            flush=True,
        )
    return True


def final_metrics(result: Any) -> dict[str, Any]:
    """The numbers among a Ray Train result's last reported metrics (every phase's summary)."""
    return {k: v for k, v in (result.metrics or {}).items() if isinstance(v, (int, float))}


class LearnerLog:
    """``metrics.jsonl`` and TensorBoard events in a local folder, copied to remote storage on
    :meth:`sync` (a local storage is written in place)."""

    def __init__(self, storage: Storage) -> None:
        from tensorboardX import SummaryWriter

        self.storage = storage
        self.folder = (
            storage.path() if storage.is_local else str(fresh_scratch(scratch_name("logs", storage)))
        )
        os.makedirs(self.folder, exist_ok=True)
        if not storage.is_local and storage.exists("metrics.jsonl"):  # a resumed run appends
            with open(os.path.join(self.folder, "metrics.jsonl"), "wb") as handle:
                handle.write(storage.read_bytes("metrics.jsonl"))
        self.writer = SummaryWriter(self.folder, flush_secs=10)
        self.closed = False

    def write(self, metrics: dict[str, Any], step: int) -> None:
        with open(os.path.join(self.folder, "metrics.jsonl"), "a") as handle:
            handle.write(json.dumps(metrics, sort_keys=True) + "\n")
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                self.writer.add_scalar(key, value, step)

    def sync(self) -> None:
        """Flush the writer and copy the files to a remote storage (nothing left to do once closed)."""
        if self.closed:
            return
        self.writer.flush()
        if not self.storage.is_local:
            for name in os.listdir(self.folder):
                self.storage.upload_file(os.path.join(self.folder, name), name)

    def close(self) -> None:
        """Sync, close the writer, and remove the local copy a remote storage was written through."""
        self.sync()
        self.writer.close()
        self.closed = True
        if not self.storage.is_local:
            shutil.rmtree(self.folder, ignore_errors=True)


def worker_place(use_gpu: bool, phase: str | None = None) -> tuple[int, int, Any]:
    """This Ray Train worker's rank, the workers' count and its device (its GPU with
    ``use_gpu``: one clear error when this worker's torch has no CUDA); with ``phase``, one line
    saying so (``[grpo] worker 0/2: cuda:0, bf16 autocast``)."""
    import ray.train
    import ray.train.torch
    import torch

    context = ray.train.get_context()
    if use_gpu and not torch.cuda.is_available():
        raise RuntimeError(
            f"use_gpu is set but this worker's torch {torch.__version__} sees no CUDA device: install the CUDA "
            "build of torch on the GPU nodes (docs/cluster.md, 'GPUs')"
        )
    device = ray.train.torch.get_device() if use_gpu else torch.device("cpu")
    rank, world = context.get_world_rank(), context.get_world_size()
    if phase is not None:
        bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
        print(f"[{phase}] worker {rank}/{world}: {device}" + (", bf16 autocast" if bf16 else ""), flush=True)
    return rank, world, device


def bf16_autocast(device: Any) -> Any:
    """bf16 autocast on a GPU that has it; a no-op context elsewhere (the CPU learner stays fp32,
    as measured for these small steps)."""
    import contextlib

    import torch

    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()
