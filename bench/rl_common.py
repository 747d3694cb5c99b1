"""What the two RL benches share: ``rl_step.py`` (the ``ppo`` phase against the same iterations in
one process) and ``grpo_step.py`` (the ``grpo`` phase against TRL's GRPOTrainer, run as
``rl_step.py --algo grpo``). Both run a phase in a fresh process on an embedded Ray of
:data:`NUM_CPUS` CPUs, alternate it with a baseline in this process after waiting for quiet CPUs,
flag runs that other processes' load contaminated, and record the ratio of medians:

    args = parser.parse_args(argv)                      # after add_run_flags / add_phase_flags
    b = measured(args.wait_quiet, baseline_run, ...)    # + other_load_cores, waited_for_quiet_s
    rows, folder, code, wall = run_phase("ppo", phase_argv("ppo", ...), work, i, timeout_s, "rl_step")
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from record import RESULTS, ROOT

NUM_CPUS = 2
#: Cores of other processes' load above which a run is flagged: a 2-thread baseline sharing 2 CPUs
#: with another busy process runs many times slower (its threads wait on each other).
BUSY_CORES = 0.3


def cpu_description() -> str:
    """``AMD EPYC, AVX512-BF16``: the CPU's model name and the widest vector extension it has."""
    name, flags = platform.processor() or platform.machine(), set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                name = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    for flag, label in (
        ("amx_bf16", "AMX"),
        ("avx512_bf16", "AVX512-BF16"),
        ("avx512f", "AVX512"),
        ("avx2", "AVX2"),
    ):
        if flag in flags:
            return f"{name}, {label}"
    return name


class LoadMonitor:
    """Cores that processes other than this one and its descendants (a phase's Ray processes
    included) kept busy between ``start()`` and ``stop()``, polled every ``interval`` seconds so
    that descendants that exit before the end are still counted as ours."""

    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self.own: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _sample(self) -> float:
        import psutil  # a dependency of Ray

        me = psutil.Process()
        for proc in [me, *me.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                cpu = proc.cpu_times()
                self.own[proc.pid] = cpu.user + cpu.system + cpu.children_user + cpu.children_system
        times = psutil.cpu_times()
        return sum(getattr(times, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq", "steal"))

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            with contextlib.suppress(Exception):
                self._sample()

    def start(self) -> LoadMonitor:
        self.busy0 = self._sample()
        self.own0 = sum(self.own.values())
        self.t0 = time.perf_counter()
        self._thread.start()
        return self

    def stop(self) -> float | None:
        self._stop.set()
        self._thread.join()
        try:
            busy = self._sample()
        except Exception:  # noqa: BLE001 - no psutil: no figure
            return None
        seconds = time.perf_counter() - self.t0
        own = sum(self.own.values()) - self.own0
        return max(0.0, (busy - self.busy0 - own) / seconds) if seconds > 0 else None


def wait_until_quiet(limit_s: float, cores: float = BUSY_CORES) -> float:
    """Wait (up to ``limit_s``) until the machine kept fewer than ``cores`` busy over 2 s; returns
    the seconds waited. Nothing of this bench runs meanwhile, so all of that load is others'."""
    import psutil

    started = time.perf_counter()
    while time.perf_counter() - started < limit_s:
        if psutil.cpu_percent(interval=2.0) / 100 * (os.cpu_count() or 1) < cores:
            break
    return time.perf_counter() - started


def fmt_load(cores: float | None) -> str:
    if cores is None:
        return "n/a"
    return f"{cores:.2f} cores" + (" - CONTAMINATED" if cores > BUSY_CORES else "")


def measured(wait_quiet: float, run: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """``run(*args)`` (one run's dict) after waiting up to ``wait_quiet`` seconds for quiet CPUs,
    with ``other_load_cores`` (others' load meanwhile) and ``waited_for_quiet_s`` added."""
    waited = wait_until_quiet(wait_quiet)
    monitor = LoadMonitor().start()
    result = run(*args)
    result["other_load_cores"], result["waited_for_quiet_s"] = monitor.stop(), round(waited, 1)
    return result


# ---------------------------------------------------------------------------------------------
# flags


def add_run_flags(
    parser: argparse.ArgumentParser, section: str, unit: str, iterations: int, threads_of: str
) -> None:
    """``--config`` (whose ``section`` both sides use), ``--iterations`` (timed ``unit`` per run,
    ``iterations`` by default), ``--repeats`` and ``--baseline-threads`` (torch threads of ``threads_of``)."""
    parser.add_argument(
        "--config", default="tiny", help=f"preset or YAML file whose {section} section both sides use"
    )
    parser.add_argument(
        "--iterations",
        type=int,
        default=iterations,
        help=f"timed {unit} per run, after one warm-up [default: {iterations}]",
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs of each side [default: 3]")
    parser.add_argument(
        "--baseline-threads", type=int, default=NUM_CPUS, help=f"torch threads of {threads_of} [default: 2]"
    )


def add_phase_flags(parser: argparse.ArgumentParser, record: str) -> None:
    """``--phase-timeout``, ``--wait-quiet`` and ``--json`` (``bench/results/<record>`` by default)."""
    parser.add_argument(
        "--phase-timeout",
        type=float,
        default=600.0,
        help="seconds a phase run may take; its learner stops 150 s before, after the iteration in progress "
        "[default: 600]",
    )
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=120.0,
        help="before each run, wait up to this many seconds for other processes to leave the CPUs [default: 120]",
    )
    parser.add_argument("--json", default=str(RESULTS / record))


def check_run_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exits through ``parser.error`` when a count of :func:`add_run_flags` is below 1."""
    if min(args.iterations, args.repeats, args.baseline_threads) < 1:
        parser.error("--iterations, --repeats and --baseline-threads must be >= 1")


def own_ray() -> None:
    """The phases start their own embedded Ray, never a cluster of ``RAY_ADDRESS``."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.pop("RAY_ADDRESS", None)


# ---------------------------------------------------------------------------------------------
# the phase side


def phase_argv(
    phase: str, config: str, work: Path, index: int, seed: int, timeout_s: float, flags: list[str]
) -> list[str]:
    """``python -m pipelines.<phase>`` on a fresh embedded Ray of :data:`NUM_CPUS` CPUs, storage
    ``work/phase-<index>``, run name ``bench``, no tracking, with ``flags``, stopping itself in time."""
    storage = work / f"phase-{index}"
    return [
        sys.executable,
        "-m",
        f"pipelines.{phase}",
        "--config",
        config,
        "--storage",
        str(storage),
        "--run-name",
        "bench",
        "--seed",
        str(seed),
        "--no-tracking",
        "--num-cpus",
        str(NUM_CPUS),
        *flags,
        # the learner stops itself in time for the export and Ray's shutdown
        "--time-limit-minutes",
        f"{max(1.0, (timeout_s - 150) / 60):.2f}",
    ]


def run_phase(
    phase: str, argv: list[str], work: Path, index: int, timeout_s: float, who: str
) -> tuple[list[dict[str, Any]], Path, int | str, float]:
    """Runs ``argv`` (:func:`phase_argv`), its output in ``work/phase-<index>.log``, interrupted
    after ``timeout_s``. Returns its ``logs/metrics.jsonl`` rows, its phase folder, its exit code
    (or ``"timeout"``) and its wall seconds; a phase that failed or logged under 2 iterations is
    a SystemExit (``<who>: the <phase> phase failed ...`` and the log's last 40 lines)."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    log_path = work / f"phase-{index}.log"
    started = time.perf_counter()
    with open(log_path, "w") as log:
        # a session of its own: on a timeout the phase and the Ray processes it started go together
        proc = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code: int | str = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            code = "timeout"
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT)  # the phase shuts its Ray down on an interrupt
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    wall = time.perf_counter() - started
    folder = work / f"phase-{index}" / "bench" / phase
    metrics = folder / "logs" / "metrics.jsonl"
    rows = (
        [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
        if metrics.is_file()
        else []
    )
    if len(rows) < 2 or (code != 0 and code != "timeout"):
        tail = "".join(log_path.read_text().splitlines(keepends=True)[-40:])
        raise SystemExit(f"{who}: the {phase} phase failed ({code}, {len(rows)} iterations logged):\n{tail}")
    return rows, folder, code, wall


# ---------------------------------------------------------------------------------------------
# the verdict


def print_machine() -> None:
    """The machine line: CPUs, their model and vector extension, torch's version."""
    import torch

    print(f"machine: {os.cpu_count()} CPU(s), {cpu_description()}; torch {torch.__version__}")


def medians(
    baseline: list[dict[str, Any]], phase: list[dict[str, Any]]
) -> tuple[float, float, float, list[float]]:
    """Median samples/s of each side, their ratio (phase / baseline) and the other-load figures of
    the contaminated runs (a warning printed when there are some)."""
    base_med = statistics.median(r["samples_per_s"] for r in baseline)
    phase_med = statistics.median(r["samples_per_s"] for r in phase)
    ratio = phase_med / base_med if base_med else 0.0
    busy = [r["other_load_cores"] for r in baseline + phase if (r["other_load_cores"] or 0) > BUSY_CORES]
    if busy:
        print(
            f"warning: other processes kept up to {max(busy):.2f} cores busy during {len(busy)} run(s): "
            "the numbers are not this machine's; re-run when it is quiet"
        )
    return base_med, phase_med, ratio, busy


def run_record(
    args: argparse.Namespace,
    models: str,
    ratio: float,
    target: float,
    busy: list[float],
    baseline: list[dict[str, Any]],
    phase: list[dict[str, Any]],
    wall: float,
) -> dict[str, Any]:
    """The JSON record's fields both benches write: the ratio and its verdict, every run, the flags."""
    import torch

    return {
        "ratio": ratio,
        "target": target,
        "passed": ratio >= target,
        "contaminated_runs": len(busy),
        "phase_samples_per_s": [r["samples_per_s"] for r in phase],
        "baseline_samples_per_s": [r["samples_per_s"] for r in baseline],
        "runs": {"baseline": baseline, "phase": phase},
        "models": models,
        "games": args.games,
        "config": args.config,
        "iterations": args.iterations,
        "baseline_threads": args.baseline_threads,
        "num_cpus": NUM_CPUS,
        "cpu": cpu_description(),
        "torch": torch.__version__,
        "bench_seconds": round(wall, 1),
    }
