"""prepare bench: games/s of the ``prepare`` phase on 2 CPUs / one process parsing with python-chess.

    python bench/prepare.py                       # ../shared/data/pgn/masters, else tests/data/pgn/masters
    python bench/prepare.py games/*.pgn.zst --runs 5 --json /tmp/prepare.json

Baseline: one process, a plain loop: decompress each file (zstandard stream), ``chess.pgn.read_game``
every game and build the UCI string of its mainline (what prepare keeps per game).
Measured: ``pipelines.prepare.run_prepare`` on an embedded local Ray of 2 CPUs, started once
(its start-up time is reported apart: the ratio excludes it). Runs alternate B, M, B, M, ... so
machine noise hits both. The last line is ``prepare ratio: X.XX (target >= 1.6)``, X being
median(measured games/s) / median(baseline games/s); a JSON record goes to ``--json``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import chess.pgn
import zstandard
from machine_load import fmt_load, timed
from record import RESULTS, ROOT, write_record

from cluster.config import RaySection
from cluster.storage import Storage, resolve_inputs, split_uri

TARGET = 1.6
NUM_CPUS = 2
OBJECT_STORE_GB = 2
SHARED_DATA = ROOT.parent / "shared" / "data" / "pgn" / "masters"
SAMPLE_DATA = ROOT / "tests" / "data" / "pgn" / "masters"


def default_inputs() -> list[str]:
    return [str(SHARED_DATA if SHARED_DATA.is_dir() else SAMPLE_DATA)]


# ---------------------------------------------------------------------------------------------
# baseline: one process, python-chess in a plain loop


@contextlib.contextmanager
def _open_text(uri: str) -> Iterator[io.TextIOBase]:
    storage, name = split_uri(uri)
    with open(storage.path(name), "rb") if storage.is_local else storage.open_input(name) as raw:
        stream: Any = raw
        if name.endswith(".zst"):
            stream = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
        yield io.TextIOWrapper(stream, encoding="utf-8", errors="replace")


def baseline_run(files: list[tuple[str, str]]) -> dict[str, Any]:
    games = plies = 0
    started = time.perf_counter()
    for uri, _ in files:
        with _open_text(uri) as handle:
            while (game := chess.pgn.read_game(handle)) is not None:
                moves = " ".join(move.uci() for move in game.mainline_moves())
                games += 1
                plies += moves.count(" ") + 1 if moves else 0
    seconds = time.perf_counter() - started
    return {"games": games, "plies": plies, "seconds": seconds, "games_per_s": games / seconds}


# ---------------------------------------------------------------------------------------------
# measured: the prepare phase on an embedded 2-CPU Ray


def measured_run(
    inputs: list[str], shard_games: int, ray_info: Any, workdir: Path, index: int
) -> dict[str, Any]:
    from cluster.tracking import PhaseRun
    from pipelines.common.phase import PhaseContext
    from pipelines.config import ChessRLConfig
    from pipelines.prepare import run_prepare

    config = ChessRLConfig.model_validate(
        {
            "run": {"name": f"bench-{index}", "storage": str(workdir)},
            "ray": {"num_cpus": NUM_CPUS, "object_store_gb": OBJECT_STORE_GB},
            "tracking": {"enabled": False},
            "prepare": {"inputs": inputs, "min_plies": 0, "shard_games": shard_games, "generate": 0},
        }
    )
    context = PhaseContext(
        config=config,
        run_storage=Storage.from_uri(str(workdir)).child(config.run.name),
        tracking=PhaseRun(active=False),
        ray=ray_info,
        log=lambda message: None,
    )
    started = time.perf_counter()
    result = run_prepare(context)
    seconds = time.perf_counter() - started
    summary = result.summary
    return {
        "games": int(summary["games_read"]),
        "written": int(summary["games_written"]),
        "skipped": summary["skipped"],
        "shards": len(summary["shards"]),
        "seconds": seconds,
        "phase_seconds": float(summary["seconds"]),  # the phase's own clock (iteration only)
        "games_per_s": int(summary["games_read"]) / seconds,
    }


def cli_run(inputs: list[str], shard_games: int, workdir: Path) -> dict[str, Any]:
    """``python -m pipelines.prepare`` end to end, Ray start and shutdown included."""
    command = [
        sys.executable,
        "-m",
        "pipelines.prepare",
        "--config",
        "tiny",
        "--generate",
        "0",
        "--inputs",
        *inputs,
        "--min-plies",
        "0",
        "--shard-games",
        str(shard_games),
        "--num-cpus",
        str(NUM_CPUS),
        "--no-tracking",
        "--storage",
        str(workdir),
        "--run-name",
        "bench-cli",
    ]
    env = dict(os.environ, CHESS_RL_QUIET="1", RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_ADDRESS", None)
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    summary_path = workdir / "bench-cli" / "prepare" / "summary.json"
    games = json.loads(summary_path.read_text())["games_read"] if summary_path.is_file() else 0
    if proc.returncode != 0:
        print(f"warning: CLI run exited {proc.returncode}: {proc.stderr.strip()[-500:]}", file=sys.stderr)
    return {
        "games": games,
        "seconds": seconds,
        "games_per_s": games / seconds if seconds > 0 else 0.0,
        "exit_code": proc.returncode,
    }


# ---------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The bench's flags (``python bench/prepare.py --help``).

    >>> args = parse_args(["a.pgn", "--runs", "1", "--no-cli"])
    >>> args.inputs, args.runs, args.shard_games, args.no_cli
    (['a.pgn'], 1, 2000, True)
    """
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("inputs", nargs="*", help="PGN files/folders/globs (default: the masters set)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each side [default: 3]")
    parser.add_argument("--shard-games", type=int, default=2000, help="prepare.shard_games [default: 2000]")
    parser.add_argument("--json", default=str(RESULTS / "prepare.json"), help="where the record goes")
    parser.add_argument("--no-cli", action="store_true", help="skip the end-to-end CLI run")
    return parser.parse_args(argv)


def run_pairs(
    args: argparse.Namespace, inputs: list[str], files: list[tuple[str, str]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], float, dict[str, Any] | None]:
    """``(baseline runs, measured runs, ray.init seconds, the CLI run or None)``: ``args.runs``
    pairs on one embedded local Ray, each printed as it ends, then (unless ``--no-cli``) the
    phase end to end through its command line, Ray start included.

        baseline, measured, ray_init_s, cli = run_pairs(args, inputs, files)
    """
    from cluster.runtime import ray_session

    baseline: list[dict[str, Any]] = []
    measured: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-prepare-") as tmp, contextlib.ExitStack() as stack:
        workdir = Path(tmp)
        started = time.perf_counter()
        ray_info = stack.enter_context(
            ray_session(RaySection(num_cpus=NUM_CPUS, object_store_gb=OBJECT_STORE_GB))
        )
        ray_init_s = time.perf_counter() - started
        print(
            f"ray.init (once, not in the ratio): {ray_init_s:.2f} s, {ray_info.resources.get('CPU', 0):.0f} CPUs"
        )
        for i in range(args.runs):
            b = timed(baseline_run, files)
            baseline.append(b)
            print(
                f"  run {i + 1} baseline  {b['games']:>7,} games in {b['seconds']:7.2f} s = {b['games_per_s']:8.1f} games/s"
                f"  (other load {fmt_load(b['other_load_cores'])})"
            )
            m = timed(measured_run, inputs, args.shard_games, ray_info, workdir, i)
            measured.append(m)
            print(
                f"  run {i + 1} prepare   {m['games']:>7,} games in {m['seconds']:7.2f} s = {m['games_per_s']:8.1f} games/s"
                f"  (other load {fmt_load(m['other_load_cores'])}; {m['written']:,} written, {m['shards']} shards)"
            )
        stack.close()  # ray.shutdown before the CLI run starts its own Ray
        cli = None if args.no_cli else cli_run(inputs, args.shard_games, workdir)
    return baseline, measured, ray_init_s, cli


def print_summary(
    baseline: list[dict[str, Any]], measured: list[dict[str, Any]], cli: dict[str, Any] | None
) -> tuple[float, float]:
    """Print the medians, the end-to-end rate and any warning (game counts that differ, other
    processes' load); returns ``(baseline median, measured median)`` in games/s."""
    base_med = statistics.median(r["games_per_s"] for r in baseline)
    meas_med = statistics.median(r["games_per_s"] for r in measured)
    base_games, meas_games = baseline[0]["games"], measured[0]["games"]
    print(f"median baseline {base_med:,.1f} games/s; median prepare {meas_med:,.1f} games/s")
    if cli is not None:
        print(
            f"end to end (python -m pipelines.prepare, Ray start included): {cli['games']:,} games in "
            f"{cli['seconds']:.2f} s = {cli['games_per_s']:,.1f} games/s "
            f"({cli['games_per_s'] / base_med:.2f}x baseline)"
        )
    if base_games != meas_games or len({r["games"] for r in baseline + measured}) != 1:
        print(
            f"warning: game counts differ: baseline {base_games:,} vs prepare {meas_games:,} "
            f"({base_games - meas_games:+,}); python-chess's read_game ends a game at a blank line "
            "before its movetext and reads the movetext as another game, prepare's splitter does not"
        )

    loads = [r["other_load_cores"] for r in baseline + measured if r["other_load_cores"] is not None]
    if loads and max(loads) > 0.25:
        print(
            f"warning: other processes kept up to {max(loads):.2f} cores busy during the runs; "
            f"on {os.cpu_count()} CPU(s) that slows the 2-CPU prepare more than the 1-CPU baseline"
        )
    return base_med, meas_med


def main(argv: list[str] | None = None) -> int:
    """Parse the flags, run the pairs (and the CLI run), write the record, print the ratio line."""
    args = parse_args(argv)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.pop("RAY_ADDRESS", None)  # always the bench's own embedded Ray
    inputs = [str(Path(p).resolve()) if "://" not in p else p for p in (args.inputs or default_inputs())]
    from pipelines.prepare import PGN_SUFFIXES

    files = resolve_inputs(inputs, PGN_SUFFIXES)
    total_bytes = sum(os.path.getsize(uri) for uri, _ in files if os.path.exists(uri))
    print(f"inputs: {', '.join(inputs)} ({len(files)} file(s), {total_bytes / 1e6:.1f} MB on disk)")
    print(
        f"machine: {os.cpu_count()} CPU(s), {platform.processor() or platform.machine()}; Ray: {NUM_CPUS} CPUs"
    )

    baseline, measured, ray_init_s, cli = run_pairs(args, inputs, files)
    base_med, meas_med = print_summary(baseline, measured, cli)
    ratio = meas_med / base_med if base_med else 0.0
    record = {
        "bench": "prepare",
        "ratio_definition": "median games/s of prepare on 2 CPUs / median games/s of python-chess in one process",
        "inputs": inputs,
        "files": len(files),
        "input_bytes": total_bytes,
        "games": {"baseline": baseline[0]["games"], "prepare": measured[0]["games"]},
        "shard_games": args.shard_games,
        "runs": {"baseline": baseline, "prepare": measured},
        "medians": {"baseline_games_per_s": base_med, "prepare_games_per_s": meas_med},
        "ray_init_seconds": ray_init_s,
        "cli": cli,
        "ratio": ratio,
        "target": TARGET,
        "passed": ratio >= TARGET,
        "ray_num_cpus": NUM_CPUS,
    }
    write_record(args.json, record)
    print(f"prepare ratio: {ratio:.2f} (target >= {TARGET})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
