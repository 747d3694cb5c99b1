"""engine_pool bench: positions/s through the EnginePool / (2 x one raw Stockfish in a plain loop).

    python bench/engine_pool.py                                  # 500 positions, 20k nodes, 3 runs
    python bench/engine_pool.py --positions 1000 --nodes 50000 --runs 5 --json /tmp/engine_pool.json

Positions: distinct, unfinished positions from real games (tests/data/pgn/lichess-2021-10-sample.pgn,
replayed with python-chess), sampled with a fixed seed. Every run gets its own slice of positions,
so neither side meets a position it has already searched (no Stockfish hash carry-over).

Baseline: one ``chess.engine.SimpleEngine.popen_uci(stockfish)`` with the pool's settings
(Threads=1, Hash=16, UCI_ShowWDL) calling ``analyse`` on each position in a plain loop, at the same
node limit; its positions/s is doubled (the pool has two engines).
Measured: ``EnginePool.create(n_actors=1, engines_per_actor=2)`` on an embedded local Ray of 2
CPUs, with ``PoolSettings(cache_size=0)`` so the pool's cache never answers; one ``pool.analyse``
of the run's positions. Ray and pool start-up are timed apart (not in the ratio). Runs alternate
B, M, B, M, ... so machine noise hits both. The last line is
``engine_pool ratio: X.XX (target >= 0.9)``, X = median(pool positions/s) / (2 x median(baseline
positions/s)). Also measured: the cache speed-up, one pool with the cache on analysing the same
positions twice (time of the first pass / time of the second). A JSON record goes to ``--json``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import chess
import chess.engine
import chess.pgn
from machine_load import fmt_load, timed
from record import RESULTS, ROOT, write_record

from cluster.config import RaySection

TARGET = 0.9
NUM_CPUS = 2
OBJECT_STORE_GB = 1
ENGINES = 2
HASH_MB = 16
PGN = ROOT / "tests" / "data" / "pgn" / "lichess-2021-10-sample.pgn"


# ---------------------------------------------------------------------------------------------
# positions from real games


def sample_positions(pgn: Path, count: int, seed: int) -> list[str]:
    """``count`` distinct unfinished positions (FENs) from the games of ``pgn``, in a seeded order."""
    seen: set[str] = set()
    candidates: list[str] = []
    with open(pgn, encoding="utf-8", errors="replace") as handle:
        while (game := chess.pgn.read_game(handle)) is not None:
            board = game.board()
            for move in game.mainline_moves():
                board.push(move)
                epd = board.epd()
                if epd in seen or board.is_game_over(claim_draw=False):
                    continue
                seen.add(epd)
                candidates.append(board.fen())
    if len(candidates) < count:
        raise SystemExit(f"{pgn} has only {len(candidates):,} distinct unfinished positions, {count:,} asked")
    return random.Random(seed).sample(candidates, count)


# ---------------------------------------------------------------------------------------------
# baseline: one raw engine in a plain loop


def open_raw_engine(path: str) -> chess.engine.SimpleEngine:
    engine = chess.engine.SimpleEngine.popen_uci(path)
    # the pool's settings: UCIEngine(threads=1, hash_mb=16) plus UCI_ShowWDL, set before every analyse
    engine.configure({"Threads": 1, "Hash": HASH_MB, "UCI_ShowWDL": True})
    return engine


def baseline_run(engine: chess.engine.SimpleEngine, fens: list[str], nodes: int) -> dict[str, Any]:
    limit = chess.engine.Limit(nodes=nodes)
    searched = 0
    started = time.perf_counter()
    for fen in fens:
        info = engine.analyse(chess.Board(fen), limit)
        searched += int(info.get("nodes", 0) or 0)
    seconds = time.perf_counter() - started
    return {
        "positions": len(fens),
        "seconds": seconds,
        "positions_per_s": len(fens) / seconds,
        "nodes_per_position": searched / len(fens),
    }


# ---------------------------------------------------------------------------------------------
# measured: the pool on an embedded 2-CPU Ray


def measured_run(pool: Any, fens: list[str], nodes: int) -> dict[str, Any]:
    from chessrl.engine.client import SearchLimit

    limit = SearchLimit(nodes=nodes)
    started = time.perf_counter()
    answers = pool.analyse(fens, limit)
    seconds = time.perf_counter() - started
    if len(answers) != len(fens) or any(a.best_move is None for a in answers):
        raise SystemExit("the pool gave fewer answers than positions, or an answer without a move")
    return {
        "positions": len(fens),
        "seconds": seconds,
        "positions_per_s": len(fens) / seconds,
        "nodes_per_position": sum(a.nodes for a in answers) / len(fens),
    }


def create_pool(cache_size: int, run: str) -> tuple[Any, float]:
    from actors.engine_pool import EnginePool, PoolSettings

    settings = PoolSettings(engines_per_actor=ENGINES, hash_mb=HASH_MB, cache_size=cache_size)
    started = time.perf_counter()
    pool = EnginePool.create(n_actors=1, engines_per_actor=ENGINES, run=run, settings=settings)
    return pool, time.perf_counter() - started


def cache_run(fens: list[str], nodes: int) -> dict[str, Any]:
    """One pool, cache on: the same positions twice; speed-up = first pass / second pass."""
    from chessrl.engine.client import SearchLimit

    pool, startup_s = create_pool(cache_size=100_000, run="bench-engine-pool-cache")
    try:
        limit = SearchLimit(nodes=nodes)
        started = time.perf_counter()
        first = pool.analyse(fens, limit)
        first_s = time.perf_counter() - started
        started = time.perf_counter()
        second = pool.analyse(fens, limit)
        second_s = time.perf_counter() - started
        stats = pool.stats()
    finally:
        pool.shutdown()
    if [a.best_move for a in first] != [a.best_move for a in second]:
        raise SystemExit("the cached pass answered differently from the first pass")
    return {
        "positions": len(fens),
        "startup_seconds": startup_s,
        "first_seconds": first_s,
        "second_seconds": second_s,
        "first_positions_per_s": len(fens) / first_s,
        "second_positions_per_s": len(fens) / second_s,
        "speedup": first_s / second_s if second_s > 0 else float("inf"),
        "cache_hits": stats["cache_hits"],
        "cache_misses": stats["cache_misses"],
    }


# ---------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The bench's flags, checked."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=20_000, help="node limit per search [default: 20000]")
    parser.add_argument("--positions", type=int, default=500, help="positions per run [default: 500]")
    parser.add_argument("--runs", type=int, default=3, help="runs of each side [default: 3]")
    parser.add_argument("--seed", type=int, default=0, help="position sampling seed [default: 0]")
    parser.add_argument("--pgn", default=str(PGN), help="games to take positions from")
    parser.add_argument("--json", default=str(RESULTS / "engine_pool.json"), help="where the record goes")
    parser.add_argument("--no-cache-run", action="store_true", help="skip the cache speed-up measurement")
    args = parser.parse_args(argv)
    if args.positions < 1 or args.runs < 1 or args.nodes < 1:
        parser.error("--positions, --runs and --nodes must be >= 1")
    return args


def alternate_runs(
    raw: chess.engine.SimpleEngine, pool: Any, per_run: list[list[str]], args: argparse.Namespace
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A warm-up of both sides, then ``--runs`` runs of the raw engine and of the pool in turn,
    run ``i`` on slice ``i``; each run's line printed as it ends."""
    baseline: list[dict[str, Any]] = []
    measured: list[dict[str, Any]] = []
    # warm-up (not timed): page in both sides' code paths on a few positions of the cache slice
    warm = (per_run[-1] if not args.no_cache_run else per_run[0])[:8]
    baseline_run(raw, warm, args.nodes)
    measured_run(pool, warm, args.nodes)
    for i in range(args.runs):
        b = timed(baseline_run, raw, per_run[i], args.nodes)
        baseline.append(b)
        print(
            f"  run {i + 1} baseline (1 engine) {b['positions']:>5,} positions in {b['seconds']:6.2f} s"
            f" = {b['positions_per_s']:7.1f}/s ({b['nodes_per_position']:,.0f} nodes each)"
            f"  (other load {fmt_load(b['other_load_cores'])})"
        )
        m = timed(measured_run, pool, per_run[i], args.nodes)
        measured.append(m)
        print(
            f"  run {i + 1} pool ({ENGINES} engines)    {m['positions']:>5,} positions in {m['seconds']:6.2f} s"
            f" = {m['positions_per_s']:7.1f}/s ({m['nodes_per_position']:,.0f} nodes each)"
            f"  (other load {fmt_load(m['other_load_cores'])})"
        )
    return baseline, measured


def measure(
    args: argparse.Namespace, stockfish: str, per_run: list[list[str]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any] | None, float, float]:
    """Both sides' runs on an embedded Ray of :data:`NUM_CPUS` CPUs, then the cache run (unless
    ``--no-cache-run``): baseline runs, pool runs, the cache figures, Ray's and the pool's start-up seconds."""
    from cluster.runtime import ray_session

    cache: dict[str, Any] | None = None
    with contextlib.ExitStack() as stack:
        raw = open_raw_engine(stockfish)
        stack.callback(raw.quit)
        started = time.perf_counter()
        ray_info = stack.enter_context(
            ray_session(RaySection(num_cpus=NUM_CPUS, object_store_gb=OBJECT_STORE_GB))
        )
        ray_init_s = time.perf_counter() - started
        pool, startup_s = create_pool(cache_size=0, run="bench-engine-pool")
        print(
            f"ray.init {ray_init_s:.2f} s ({ray_info.resources.get('CPU', 0):.0f} CPUs); pool start-up "
            f"(1 actor x {ENGINES} engines) {startup_s:.2f} s; neither in the ratio"
        )
        try:
            baseline, measured = alternate_runs(raw, pool, per_run, args)
        finally:
            pool.shutdown()
        if not args.no_cache_run:
            cache = cache_run(per_run[-1], args.nodes)
    return baseline, measured, cache, ray_init_s, startup_s


def report(
    args: argparse.Namespace,
    stockfish: str,
    baseline: list[dict[str, Any]],
    measured: list[dict[str, Any]],
    cache: dict[str, Any] | None,
    ray_init_s: float,
    startup_s: float,
    load: tuple[float, float],
) -> None:
    """The medians, the warnings, the cache line, the JSON record and the ratio line."""
    load1, load5 = load
    base_med = statistics.median(r["positions_per_s"] for r in baseline)
    meas_med = statistics.median(r["positions_per_s"] for r in measured)
    ratio = meas_med / (ENGINES * base_med) if base_med else 0.0
    print(
        f"median baseline {base_med:,.1f} positions/s (x{ENGINES} = {ENGINES * base_med:,.1f}); "
        f"median pool {meas_med:,.1f} positions/s"
    )
    loads = [r["other_load_cores"] for r in baseline + measured if r["other_load_cores"] is not None]
    if loads and max(loads) > 0.25:
        print(
            f"warning: other processes kept up to {max(loads):.2f} cores busy during the runs; "
            f"on {os.cpu_count()} CPU(s) that slows the 2-engine pool more than the 1-engine baseline"
        )
    if cache is not None:
        print(
            f"cache: {cache['positions']:,} positions twice through one pool: first {cache['first_seconds']:.2f} s, "
            f"second {cache['second_seconds']:.3f} s ({cache['cache_hits']:,} hits): "
            f"speed-up {cache['speedup']:,.1f}x"
        )

    record = {
        "bench": "engine_pool",
        "ratio_definition": (
            "median positions/s of EnginePool(1 actor x 2 engines, cache off) on 2 CPUs / "
            "(2 x median positions/s of one raw python-chess SimpleEngine in a plain loop), same node limit"
        ),
        "pgn": args.pgn,
        "seed": args.seed,
        "nodes": args.nodes,
        "positions": args.positions,
        "engines": ENGINES,
        "hash_mb": HASH_MB,
        "stockfish": stockfish,
        "runs": {"baseline": baseline, "pool": measured},
        "medians": {
            "baseline_positions_per_s": base_med,
            "baseline_x2_positions_per_s": ENGINES * base_med,
            "pool_positions_per_s": meas_med,
        },
        "ray_init_seconds": ray_init_s,
        "pool_startup_seconds": startup_s,
        "cache": cache,
        "cache_speedup": cache["speedup"] if cache is not None else None,
        "ratio": ratio,
        "target": TARGET,
        "passed": ratio >= TARGET,
        "ray_num_cpus": NUM_CPUS,
        "load_average_before": [load1, load5],
    }
    write_record(args.json, record)
    print(f"engine_pool ratio: {ratio:.2f} (target >= {TARGET})")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.pop("RAY_ADDRESS", None)  # always the bench's own embedded Ray
    from chessrl.engine.client import find_stockfish

    stockfish = find_stockfish()
    # one slice per throughput run, one more for the cache run: no position is searched twice
    slices = args.runs + (0 if args.no_cache_run else 1)
    fens = sample_positions(Path(args.pgn), args.positions * slices, args.seed)
    per_run = [fens[i * args.positions : (i + 1) * args.positions] for i in range(slices)]
    load1, load5, _ = os.getloadavg()
    print(
        f"positions: {args.positions:,} per run x {slices} slice(s), distinct, from {args.pgn}; "
        f"{args.nodes:,} nodes per search; engine {stockfish}"
    )
    print(
        f"machine: {os.cpu_count()} CPU(s), {platform.processor() or platform.machine()}; "
        f"Ray: {NUM_CPUS} CPUs; load average before: {load1:.2f} (1 min), {load5:.2f} (5 min)"
    )

    baseline, measured, cache, ray_init_s, startup_s = measure(args, stockfish, per_run)
    report(args, stockfish, baseline, measured, cache, ray_init_s, startup_s, (load1, load5))
    return 0


if __name__ == "__main__":
    sys.exit(main())
