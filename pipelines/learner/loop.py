"""The skeleton of the hand-written Ray Train learner loops (``ppo``, ``grpo``, ``selfplay``):
:class:`LoopLearner` keeps the loop's state, resumes it, reports each iteration, checkpoints on
a cadence and ends the run, so that each phase's loop is its algorithm; :class:`LoopConfig` is
what it reads of the typed config each phase's driver builds (a frozen dataclass under
``train_loop_config["config"]``, read as attributes); :func:`frozen_copy` and
:func:`export_pretrained` are the reference model and the export those loops share. On the
driver: :func:`fit_then_stop` (the fit, then the actors stopped), :func:`stop_collectors`,
:func:`read_metrics` and :func:`curve` for the summary. (The phases
that train through a TRL ``Trainer``, sft, reward and dpo, build on :mod:`pipelines.learner.trl`;
both build on :mod:`pipelines.learner`.)
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster.storage import Storage
from pipelines.learner import LearnerLog, WorkerConfig, fresh_scratch, read_checkpoint, scratch_name


@dataclass(frozen=True, kw_only=True)
class LoopConfig(WorkerConfig):
    """What :class:`LoopLearner` reads of a loop learner's config: each phase's config
    (``PPOLoopConfig``, ``GRPOLoopConfig``, ``SelfplayLoopConfig``) extends it. The driver builds
    one and hands it to Ray Train under one key (:meth:`~pipelines.learner.WorkerConfig.train_loop_config`);
    the worker's loop takes it back with :meth:`~pipelines.learner.WorkerConfig.of`, with the
    progress board's handle that :func:`pipelines.learner.torch_trainer` added. Every field but
    ``progress`` and ``scratch`` is the driver's to set: the defaults are the config sections'.

    >>> cfg = LoopConfig(phase_uri="/tmp/run/ppo", iterations=4, checkpoint_interval=2, time_limit_s=None,
    ...                  tracking_uri=None, tracking_run_id=None)
    >>> LoopConfig.of({**cfg.train_loop_config(), "progress": "board", "scratch": "x"}).progress
    'board'
    """

    phase_uri: str
    """The phase's folder (logs under ``<phase>/logs``)."""
    iterations: int
    """The iterations to train (a resumed run goes on to this many in all)."""
    checkpoint_interval: int
    """A checkpoint every this many iterations (and the final one)."""
    time_limit_s: float | None
    """Seconds of training after which the loop stops (None: no limit)."""
    tracking_uri: str | None
    """MLflow's tracking URI (None: tracking off)."""
    tracking_run_id: str | None
    """The MLflow run the metrics go to."""


class LoopLearner:
    """The skeleton of a hand-written Ray Train learner loop (``ppo``, ``grpo``, ``selfplay``):
    the loop's ``state`` dict, resuming from Ray Train's latest checkpoint, the time limit, each
    iteration's reports (``metrics.jsonl`` and TensorBoard through :class:`LearnerLog`, MLflow, a
    line on the driver's progress board), the checkpoint cadence and the final checkpoint; the
    phase's loop keeps only its algorithm.

        learner = LoopLearner("ppo", cfg, {"iteration": 0, "seconds": 0.0},
                              {"policy": policy, "policy_opt": policy_opt})
        learner.resume("learner resumes at iteration {iteration}")  # prints "[ppo] learner resumes ..."
        state = learner.state                       # the resumed state, or the one given
        while state["iteration"] < cfg.iterations and not learner.out_of_time():
            ...                                     # one iteration of the algorithm
            state["iteration"] += 1
            metrics = {..., "elapsed_s": learner.tick()}   # tick: state["seconds"], trained so far
            learner.record(metrics, "reward +0.12, ...")   # metrics.jsonl, MLflow, the board
            learner.maybe_checkpoint(metrics)       # every checkpoint_interval, but not the last
        learner.finish({**metrics, "iteration": state["iteration"]})  # closes the log; done=1

    A checkpoint is one file, ``learner.pt``: ``{name: part.state_dict() for each part, "state":
    state, **extra()}``; :meth:`resume` loads each part's state_dict and the state back, and
    returns the whole saved dict (for what ``extra`` added, e.g. an RNG state), None on a fresh
    start. :meth:`snapshot` is that dict, for a phase that keeps copies elsewhere too.

    ``cfg`` is the loop's config (a :class:`LoopConfig`; read here: ``phase_uri``,
    ``tracking_uri`` and ``tracking_run_id``, ``progress``, ``time_limit_s``,
    ``checkpoint_interval`` and ``iterations``). ``clock``: the
    state's key for the seconds trained (kept across resumes, so the time limit counts them).
    ``log_s`` and ``report_s`` are the seconds the last :meth:`record` and
    :meth:`maybe_checkpoint` took (a loop may log them with its next iteration).

    By default Ray Train hears from the learner at checkpoints only (a report is a barrier with
    the controller, ~1.2 s with Ray 2.60 on 2 CPUs, more than a tiny model's whole step), each
    report with ``done`` 0, or 1 for the final one. With ``report_every_iteration`` every
    :meth:`maybe_checkpoint` reports the metrics as they are, and only the final report adds
    ``done``. With several workers only the ``lead`` one logs, prints and writes checkpoints; the
    others report their metrics (``{"done": 1}`` at the end), as Ray Train needs every worker's.
    """

    def __init__(
        self,
        name: str,
        cfg: LoopConfig,
        state: dict[str, Any],
        parts: dict[str, Any],
        *,
        extra: Callable[[], dict[str, Any]] | None = None,
        clock: str = "seconds",
        lead: bool = True,
        report_every_iteration: bool = False,
    ) -> None:
        import time

        from cluster.tracking import RunMetricsLogger

        self.name, self.cfg, self.state, self.parts = name, cfg, state, parts
        self.extra, self.clock, self.lead = extra, clock, lead
        self.report_every_iteration = report_every_iteration
        self.phase = Storage.from_uri(cfg.phase_uri)
        self.mlflow = RunMetricsLogger(cfg.tracking_uri, cfg.tracking_run_id) if lead else None
        self.log = LearnerLog(self.phase.child("logs")) if lead else None
        self.first_iteration = int(state["iteration"])
        self.started = time.perf_counter() - float(state.get(clock, 0.0))
        self.log_s = self.report_s = 0.0

    def resume(self, message: str) -> dict[str, Any] | None:
        """Load Ray Train's latest checkpoint, if any: each part's state_dict and the state; the
        lead prints ``[<name>] <message>`` (``message`` formatted with the state's keys). Returns
        the saved dict, None on a fresh start. The clock restarts from the state's seconds."""

        import ray.train
        import torch

        saved = None
        checkpoint = ray.train.get_checkpoint()
        if checkpoint is not None:
            with read_checkpoint(checkpoint) as folder:
                saved = torch.load(os.path.join(folder, "learner.pt"), map_location="cpu", weights_only=False)
            for key, part in self.parts.items():
                part.load_state_dict(saved[key])
            self.state = saved["state"]
            if self.lead:
                print(f"[{self.name}] " + message.format(**self.state), flush=True)
        self.first_iteration = int(self.state["iteration"])
        self.start_clock()
        return saved

    def start_clock(self) -> None:
        """Count training time from now on (plus what the state says earlier runs trained):
        :meth:`resume` calls it; a loop with more set-up after resuming calls it again."""
        import time

        self.started = time.perf_counter() - float(self.state.get(self.clock, 0.0))

    def elapsed(self) -> float:
        """Seconds trained, this run's and those of the runs it resumes."""
        import time

        return time.perf_counter() - self.started

    def out_of_time(self) -> bool:
        """Whether the config's time limit (``time_limit_s``) has passed."""
        limit = self.cfg.time_limit_s
        return limit is not None and self.elapsed() > limit

    def tick(self) -> float:
        """The seconds trained so far, kept in the state (under ``clock``) and returned."""
        self.state[self.clock] = self.elapsed()
        return float(self.state[self.clock])

    def record(self, metrics: dict[str, Any], line: str, step: int | None = None) -> None:
        """One iteration's report (lead only): ``metrics.jsonl``/TensorBoard and MLflow at
        ``step`` (default: the iteration), and ``line`` on the driver's progress board. Its own
        time is ``log_s``."""
        import time

        from cluster.progress import report_progress

        if not self.lead:
            return
        started = time.perf_counter()
        step = self.state["iteration"] if step is None else step
        assert self.log is not None and self.mlflow is not None
        self.log.write(metrics, step)
        self.mlflow.log(metrics, step=step)
        report_progress(
            self.cfg.progress, self.state["iteration"], line, start=self.first_iteration, show=True
        )
        self.log_s = time.perf_counter() - started

    def checkpoint_due(self) -> bool:
        """Every ``checkpoint_interval`` iterations, except the last (:meth:`finish` saves it)."""
        iteration = self.state["iteration"]
        return iteration % self.cfg.checkpoint_interval == 0 and iteration < self.cfg.iterations

    def maybe_checkpoint(self, metrics: dict[str, Any], due: bool | None = None) -> None:
        """A checkpoint when ``due`` (default: :meth:`checkpoint_due`); else, with
        ``report_every_iteration``, the metrics alone to Ray Train. Its own time is ``report_s``."""
        import time

        import ray.train

        started = time.perf_counter()
        if self.checkpoint_due() if due is None else due:
            self.save_checkpoint(metrics)
        elif self.report_every_iteration:
            ray.train.report(metrics)
        self.report_s = time.perf_counter() - started

    def snapshot(self) -> dict[str, Any]:
        """What a checkpoint's ``learner.pt`` holds: the parts' state_dicts, the state, ``extra()``."""
        saved = {key: part.state_dict() for key, part in self.parts.items()}
        return {**saved, "state": self.state, **(self.extra() if self.extra is not None else {})}

    def save_checkpoint(self, metrics: dict[str, Any], final: bool = False) -> None:
        """Report ``metrics`` to Ray Train with a checkpoint (``learner.pt``, after syncing the
        logs); ``final`` marks the last one. A worker that is not the lead reports its metrics
        only (``{"done": 1}`` for the final one)."""

        import ray.train
        import torch
        from ray.train import Checkpoint

        if not self.lead:
            ray.train.report({"done": 1} if final else metrics)
            return
        folder = str(
            fresh_scratch(scratch_name(f"{self.name}-ckpt", self.phase))
        )  # Ray removes it once uploaded
        torch.save(self.snapshot(), os.path.join(folder, "learner.pt"))
        assert self.log is not None
        self.log.sync()
        done = {"done": int(final)} if final or not self.report_every_iteration else {}
        ray.train.report(
            {**metrics, **done},
            checkpoint=Checkpoint.from_directory(folder),
            delete_local_checkpoint_after_upload=True,
        )

    def finish(
        self,
        metrics: dict[str, Any],
        state_file: str | None = "learner_state.json",
        export: Callable[[], None] | None = None,
    ) -> None:
        """The end of the loop: the state as JSON in the phase's folder (``state_file``; None:
        not written), then ``export()`` (the phase's models, after the state: a failed export
        leaves the state behind), the logs closed, and the final checkpoint with ``metrics`` and
        ``done`` 1."""
        if self.lead and state_file is not None:
            self.phase.write_text(state_file, json.dumps(self.state, indent=1))
        if export is not None:
            export()
        if self.lead:
            assert self.log is not None
            self.log.close()
        self.save_checkpoint(metrics, final=True)


def frozen_copy(model: Any) -> Any:
    """A copy of ``model`` in eval mode with no gradients: the reference a KL penalty compares to."""
    import copy

    reference = copy.deepcopy(model).eval()
    for p in reference.parameters():
        p.requires_grad_(False)
    return reference


def export_pretrained(
    model: Any, tokenizer: Any, out: Storage, prefix: str, edit: Callable[[Path], None] | None = None
) -> None:
    """``model`` and ``tokenizer`` saved as a Hugging Face folder (in a temporary folder named
    ``<prefix>...``), ``edit(folder)`` applied, and every file copied to ``out``."""
    with tempfile.TemporaryDirectory(prefix=prefix) as scratch:
        folder = Path(scratch)
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        if edit is not None:
            edit(folder)
        for path in sorted(folder.iterdir()):
            if path.is_file():
                out.upload_file(path, path.name)


def stop_collectors(server: Any, collectors: list[Any], runs: list[Any]) -> list[dict[str, Any]]:
    """Stop the parameter server (the collectors end their runs when they see it), then each
    collector's summary (the first line of its error when it cannot stop cleanly: reported, not
    fatal); the collectors and the server are killed."""
    import ray

    ray.get(server.stop.remote())
    summaries = []
    for collector, ref in zip(collectors, runs, strict=True):
        try:
            summaries.append(ray.get(ref, timeout=120))
        except Exception as exc:  # noqa: BLE001 - reported, not fatal
            summaries.append({"error": str(exc).splitlines()[0]})
        ray.kill(collector)
    ray.kill(server)
    return summaries


def read_metrics(logs: Storage) -> list[dict[str, Any]]:
    """The rows of ``metrics.jsonl`` in ``logs`` (:class:`LearnerLog`); none when there is no file."""
    if not logs.exists("metrics.jsonl"):
        return []
    return [json.loads(line) for line in logs.read_text("metrics.jsonl").splitlines() if line.strip()]


def curve(first: dict[str, Any], last: dict[str, Any], key: str, fmt: str) -> str:
    """``first -> last`` of one metric, each as ``fmt`` (nan when missing), for a summary line.

    >>> curve({"loss": 2.0}, {"loss": 1.25}, "loss", ".2f"), curve({}, {}, "kl", ".1f")
    ('2.00 -> 1.25', 'nan -> nan')
    """
    return f"{format(first.get(key, float('nan')), fmt)} -> {format(last.get(key, float('nan')), fmt)}"


def fit_then_stop(
    trainer: Any, board: Any, stop: Callable[[], list[dict[str, Any]]]
) -> tuple[Any, float, list[dict[str, Any]]]:
    """``trainer.fit()`` with the progress ``board`` open, then ``stop()`` however the fit ends:
    the result, the seconds from the start of the fit to the end of ``stop()``, and what ``stop()``
    returned (e.g. the collectors' summaries)."""
    import time

    started = time.perf_counter()
    try:
        with board:
            result = trainer.fit()
    finally:
        summaries = stop()
    return result, time.perf_counter() - started, summaries
