"""Bench: the selfplay learner's training samples/s with the replay window through the Ray Data
stream (``selfplay.replay_reader: stream``) ÷ with each worker's ``read_parquet`` a pass
(``parquet``, the default). Median of ``--repeats`` runs of each, alternating, the ratio on the
last line.

    .venv/bin/python bench/replay_window.py                 # 3 runs of each, ~6 minutes on 2 CPUs
    .venv/bin/python bench/replay_window.py --repeats 5 --iterations 6

Each run is ``python -m pipelines.selfplay --num-cpus 2 --no-tracking`` in a fresh process and
temporary storage: the learner plays its own games (no collectors, so nothing else wants the
CPUs while it trains), ``--train-ratio`` 16 on a small window, no gate and no final evaluation.
Samples/s: the positions trained in iterations 2..N (steps × batch) over their ``train_s`` (the
training steps, reading included), from the run's ``logs/metrics.jsonl``; iteration 1 (the
stream's start, the first read) is a warm-up. Before each run the bench waits (``--wait-quiet``
seconds at most) for quiet CPUs and reports others' load meanwhile.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import rl_common
from record import RESULTS, ROOT, write_record

#: The phase's flags on both sides but ``--replay-reader``.
FLAGS = [
    "--config",
    "tiny",
    "--no-tracking",
    "--num-cpus",
    "2",
    "--producer-workers",
    "0",
    "--episodes",
    "4",
    "--concurrent-games",
    "4",
    "--mcts-simulations",
    "8",
    "--max-plies",
    "48",
    "--batch-size",
    "64",
    "--train-ratio",
    "16",
    "--window-positions",
    "2048",
    "--gate-games",
    "0",
    "--eval-games",
    "0",
    "--checkpoint-interval",
    "100",
    "--set",
    "selfplay.time_limit_minutes=null",
]


def phase_run(reader: str, iterations: int, seed: int, timeout: float) -> dict[str, Any]:
    """One selfplay run with ``reader``: its training samples/s over iterations 2..N."""
    with tempfile.TemporaryDirectory() as work:
        command = [sys.executable, "-m", "pipelines.selfplay", *FLAGS, "--storage", work, "--run-name", "b"]
        command += ["--iterations", str(iterations), "--seed", str(seed), "--replay-reader", reader]
        started = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise SystemExit(f"selfplay ({reader}) exited {done.returncode}:\n{done.stderr[-3000:]}")
        lines = (Path(work) / "b" / "selfplay" / "logs" / "metrics.jsonl").read_text().splitlines()
        metrics = [json.loads(line) for line in lines][1:]
    samples = sum(m["learner_samples_per_s"] * m["train_s"] for m in metrics)
    train_s = sum(m["train_s"] for m in metrics)
    return {
        "samples_per_s": samples / train_s,
        "train_s": train_s,
        "samples": round(samples),
        "wall_s": time.perf_counter() - started,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs of each reader [3]")
    parser.add_argument("--iterations", type=int, default=5, help="iterations a run, the first untimed [5]")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--wait-quiet", type=float, default=60.0, help="seconds to wait for quiet CPUs [60]")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a run may take [900]")
    parser.add_argument("--json", default=str(RESULTS / "replay_window.json"))
    args = parser.parse_args(argv)
    runs: dict[str, list[dict[str, Any]]] = {"parquet": [], "stream": []}
    for i in range(args.repeats):
        for reader, got in runs.items():
            run = rl_common.measured(
                args.wait_quiet, phase_run, reader, args.iterations, args.seed + i, args.timeout
            )
            got.append(run)
            print(
                f"  run {i + 1} {reader:7s} {run['samples_per_s']:8.1f} samples/s ({run['samples']} "
                f"in {run['train_s']:.1f} s; run {run['wall_s']:.0f} s; other load "
                f"{rl_common.fmt_load(run['other_load_cores'])})",
                flush=True,
            )
    parquet, stream, ratio, busy = rl_common.medians(runs["parquet"], runs["stream"])
    write_record(
        args.json,
        {
            "bench": "replay_window",
            "ratio_definition": "median selfplay learner samples/s (positions trained / train_s, "
            "iterations 2..N) with replay_reader stream / with replay_reader parquet",
            "ratio": ratio,
            **runs,
            "busy": busy,
            "repeats": args.repeats,
        },
    )
    print(f"median parquet {parquet:.1f} samples/s; median stream {stream:.1f} samples/s")
    print(
        f"replay_window ratio (stream samples/s / parquet samples/s, median of {args.repeats}): "
        f"{ratio:.2f} (the faster is the default; the stream is kept at >= 0.90)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
