"""Progress lines printed by the driver while a phase's learner runs in Ray Train workers.

A learner's rank-0 worker reports each step or iteration to a :class:`ProgressBoard`; the
driver prints one line per report it is told to show (an iteration, a held-out evaluation, the
last step) and otherwise one line every ``every_s`` seconds, each with the position out of the
total, the time so far, the time left and the figures that matter; when nothing was printed for
1.5 times that (the learner starting, a long evaluation), a line says so::

    [sft] step 120/300 (40%), 1:12 elapsed, ~1:48 left: loss 2.31, 2,950 tokens/s

The driver side::

    with ProgressBoard(log, unit="step", total=300) as board:
        loop_config["progress"] = board.handle      # picklable: a Ray queue
        trainer.fit()

and in the worker::

    report_progress(cfg["progress"], done=step, figures="loss 2.31", show=step % 100 == 0)

The worker's own output then need not repeat the line: what workers print reaches the console
prefixed with their process, and stays in Ray's log files; metrics also go to MLflow.

>>> progress_line("step", 120, 300, elapsed_s=72, start=0, figures="loss 2.31")
'step 120/300 (40%), 1:12 elapsed, ~1:48 left: loss 2.31'
>>> progress_line("iteration", 3, 3, elapsed_s=3725, start=0, figures="")
'iteration 3/3 (100%), 1:02:05 elapsed'
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["ProgressBoard", "clock", "progress_line", "report_progress"]


def clock(seconds: float) -> str:
    """``m:ss`` or ``h:mm:ss``.

    >>> clock(5), clock(600), clock(3600)
    ('0:05', '10:00', '1:00:00')
    """
    whole = max(0, int(round(seconds)))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def progress_line(
    unit: str,
    done: int,
    total: int,
    *,
    elapsed_s: float,
    start: int,
    figures: str,
    since: tuple[float, int] | None = None,
) -> str:
    """``unit done/total (pct), elapsed, ~left: figures``. The time left is the rate of this
    invocation (``done - start`` units in ``elapsed_s``; ``start`` > 0 for a resumed run) applied
    to what remains; with ``since = (elapsed_s, done)`` of an earlier report, the rate since that
    one (a learner's start-up time is not a rate). It is left out until one unit is done, and
    when nothing remains.

    >>> progress_line("step", 30, 100, elapsed_s=80, start=0, figures="", since=(60, 10))
    'step 30/100 (30%), 1:20 elapsed, ~1:10 left'
    """
    total = max(total, 1)
    parts = [f"{unit} {done}/{total} ({100 * done // total}%)", f"{clock(elapsed_s)} elapsed"]
    if since is not None and since[1] < done < total:
        parts.append(f"~{clock((elapsed_s - since[0]) / (done - since[1]) * (total - done))} left")
    elif start < done < total:
        parts.append(f"~{clock(elapsed_s / (done - start) * (total - done))} left")
    return ", ".join(parts) + (f": {figures}" if figures else "")


def report_progress(handle: Any, done: int, figures: str = "", *, start: int = 0, show: bool = False) -> None:
    """From a worker: ``done`` units so far (``start``: where this invocation began), with the
    figures to print. ``show`` asks for a line even when the last one is recent. A missing
    ``handle`` (the learner run without a board) or a board that is gone is ignored: progress
    never stops training."""
    if handle is None:
        return
    with contextlib.suppress(Exception):  # the driver's board is best effort
        handle.put_nowait({"done": int(done), "start": int(start), "figures": figures, "show": bool(show)})


class ProgressBoard:
    """The driver's end: a Ray queue the learner reports to, and a thread that prints the lines
    (see the module docstring). ``every_s``: the longest gap between two lines while reports
    keep arriving; ``poll_s``: how often the board looks at the queue."""

    def __init__(
        self,
        log: Callable[[str], None],
        unit: str,
        total: int,
        *,
        every_s: float = 15.0,
        queue: Any = None,
        poll_s: float = 1.0,
    ) -> None:
        self.log, self.unit, self.total, self.every_s, self.poll_s = log, unit, total, every_s, poll_s
        self._queue = queue
        self.started = time.perf_counter()
        self.last_printed = self.started
        self.last: dict[str, Any] | None = None  # the newest report not printed yet
        self.seen: dict[str, Any] | None = None  # the newest report
        self.last_report = self.started
        self.first: tuple[float, int] | None = None  # (seconds, done) of the first report
        self.lines = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="progress-board", daemon=True)

    @property
    def handle(self) -> Any:
        """What workers put their reports in (``put_nowait``); the board reads ``qsize`` and
        ``get_nowait_batch``. The Ray queue actor is made on first use, so a trainer refused
        before it starts leaves none behind."""
        if self._queue is None:
            from ray.util.queue import Queue

            from cluster.runtime import on_driver_node

            # num_cpus=0: an actor asks one CPU to be scheduled by default, and the learner may
            # hold them all. On the driver's node: elsewhere an autoscaler may take the node
            # away with the queue on it, and every line reported after (a CI run lost one so).
            self._queue = Queue(actor_options={"num_cpus": 0, "scheduling_strategy": on_driver_node()})
        return self._queue

    def __enter__(self) -> ProgressBoard:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._drain()
        if self.last is not None:  # the newest state, if it was held back by the throttle
            self._print(self.last)
        actor = getattr(self._queue, "actor", None)
        if actor is not None:
            with contextlib.suppress(Exception):  # the cluster may be shutting down
                import ray

                ray.kill(actor)

    def _print(self, item: dict[str, Any]) -> None:
        line = progress_line(
            self.unit,
            item["done"],
            self.total,
            elapsed_s=time.perf_counter() - self.started,
            start=item["start"],
            figures=item["figures"],
            since=self.first,
        )
        self.log(line)
        self.lines += 1
        self.last_printed = time.perf_counter()
        self.last = None

    def _take(self, item: dict[str, Any]) -> None:
        self.seen, self.last_report = item, time.perf_counter()
        if self.first is None:  # the rate of what follows leaves out the learner's start-up
            self.first = (self.last_report - self.started, item["done"])
        due = time.perf_counter() - self.last_printed >= self.every_s
        if item["show"] or due or item["done"] >= self.total:
            self._print(item)
        else:
            self.last = item

    def _drain(self) -> None:
        queue = self._queue
        if queue is None:  # nothing has read the handle: no worker can have reported
            return
        try:
            items = queue.get_nowait_batch(queue.qsize())
        except Exception:  # noqa: BLE001 - the queue actor is gone (cluster shutting down)
            return
        for item in items:
            self._take(item)

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            self._drain()
            quiet_s = time.perf_counter() - self.last_printed
            if self.last is not None and quiet_s >= self.every_s:
                self._print(self.last)
            elif self.last is None and quiet_s >= 1.5 * self.every_s:
                self._heartbeat()

    def _heartbeat(self) -> None:
        """Nothing reported for a while (the learner starting, a long evaluation): say so, so that
        a run never looks hung."""
        now = time.perf_counter()
        if self.seen is None:
            self.log(
                f"the learner is starting, {clock(now - self.started)} elapsed ({self.total} {self.unit}s in all)"
            )
        else:
            self.log(
                f"{self.unit} {self.seen['done']}/{self.total}, {clock(now - self.started)} elapsed: "
                f"working on the next {self.unit} (none reported for {clock(now - self.last_report)})"
            )
        self.lines += 1
        self.last_printed = now
