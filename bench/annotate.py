"""annotate bench: positions/s of the ``annotate`` phase's engine work / the same engines in plain loops.

    python bench/annotate.py                                   # 300 positions, 100 nodes a move, 3 repeats
    python bench/annotate.py --positions 1000 --nodes 200 --repeats 5 --json /tmp/annotate.json

Positions: distinct, unfinished positions from real games (tests/data/pgn/lichess-2021-10-sample.pgn,
:func:`engine_pool.sample_positions`), sampled with a fixed seed; each repeat gets its own slice,
so no side meets a position it has already searched (and the pool's cache never answers).
Every position gets what the phase gives it: one search with MultiPV 500 (every legal move) and
``--nodes`` times its legal-move count nodes, on a cleared hash (the phase passes ``fresh=True``).

Baseline: ``--engines`` ``chess.engine.SimpleEngine.popen_uci(stockfish)`` (Threads=1, Hash=16,
UCI_ShowWDL, as the pool's engines), each in its own thread looping over its share of the
positions (every ``--engines``-th): ``engine.analyse(board, Limit(nodes=...), multipv=500,
game=object())`` (a new game each search: the hash cleared, as ``fresh=True`` does in the pool).
Measured: :func:`pipelines.annotate.annotate_rows` (boards, limits, ``EnginePool.analyse``, one
:func:`chessrl.engine.annotation.annotate` and table row a position) on
``EnginePool.spread(--engines)`` with the phase's default :class:`PoolSettings` (cache on, as in the
phase: distinct slices keep it from answering, and the bench checks it had no hits), on an embedded
local Ray of ``--engines`` CPUs. Ray and pool start-up are timed apart (not in the ratio). Runs
alternate B, M, B, M, ... so machine noise hits both. The last line is
``annotate ratio: X.XX (target >= 0.9)``, X = median(measured positions/s) / median(baseline
positions/s). Both sides print the nodes each search spent (the same work), and the ratio can pass
1: the pool's engines speak UCI over plain pipes (:mod:`chessrl.engine.uci`), cheaper than
python-chess's asyncio ``SimpleEngine`` at reading a MultiPV search's many ``info`` lines.

Driver ceiling: the positions/s the driver coordinates when the engines answer instantly. After
the repeats, the pool's LRU cache holds every slice's answers, keyed by (position, limit, MultiPV,
fresh): ``annotate_rows`` over all the slices again (fresh=True, as the phase calls it) is answered
from the actor's cache without any search (checked: every position a hit, none searched), so its
time is the driver's batching, ``ray.wait`` loop, transfers, ``annotate`` and rows, plus the
actor's own per-position work (parsing, cache look-up; on a cluster that runs on the engine nodes,
here on the same 2 CPUs). Median of ``--repeats`` passes; the driver process's CPU seconds per
position are reported too. "Nodes' worth" = ceiling / median measured positions/s, the
positions/s one node of ``--engines`` CPUs annotates at ``--nodes`` (target >= 100).

Measured on 2 quiet AMD EPYC cores (AVX512-BF16), ``--positions 600 --repeats 3`` (100 nodes a
move, ~2,900 nodes a position): the plain loops 144 positions/s, the phase's engine work 325
(ratio **2.26**: the pool's pipe client reads a MultiPV search's lines far cheaper than
``SimpleEngine``); driver ceiling 4,097 positions/s = 13 nodes of 2 CPUs (target >= 100), the
driver's own CPU 0.03 ms a position (34,700 positions/s alone, ~107 nodes' worth): the measured
ceiling is the cache path of actors on the same 2 CPUs, not the driver. Before the records were
made beside the engines, the driver spent 0.3-0.4 ms a position (loaded small runs: ceiling 5-7
nodes' worth).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import chess
import chess.engine
from engine_pool import PGN, sample_positions
from machine_load import fmt_load, timed
from record import RESULTS, write_record

from chessrl.data.positions import phase_of
from chessrl.engine.annotation import ALL_MOVES_MULTIPV
from cluster.config import RaySection

TARGET = 0.9
CEILING_TARGET_NODES = 100
HASH_MB = 16
OBJECT_STORE_GB = 1
WARM_POSITIONS = 8


def position_rows(fens: list[str]) -> list[dict[str, Any]]:
    """The rows ``annotate_rows`` takes: ``fen``, ``game_id``, ``ply`` (from the move number), ``phase``."""
    rows = []
    for fen in fens:
        board = chess.Board(fen)
        ply = 2 * (board.fullmove_number - 1) + (board.turn == chess.BLACK)
        rows.append({"fen": fen, "game_id": "bench", "ply": ply, "phase": phase_of(board, ply)})
    return rows


# ---------------------------------------------------------------------------------------------
# baseline: plain python-chess loops, one engine a thread


def open_raw_engine(path: str) -> chess.engine.SimpleEngine:
    engine = chess.engine.SimpleEngine.popen_uci(path)
    engine.configure({"Threads": 1, "Hash": HASH_MB, "UCI_ShowWDL": True})  # the pool's engine settings
    return engine


def plain_loop(engine: chess.engine.SimpleEngine, rows: list[dict[str, Any]], nodes: int) -> tuple[int, int]:
    """One engine's share: an all-moves search of each position from a cleared hash; the moves
    the search reported (lines) and the nodes it searched."""
    lines = searched = 0
    for row in rows:
        board = chess.Board(row["fen"])
        limit = chess.engine.Limit(nodes=nodes * board.legal_moves.count())
        infos = engine.analyse(board, limit, multipv=ALL_MOVES_MULTIPV, game=object())
        lines += len(infos)
        searched += int(infos[0].get("nodes", 0) or 0)
    return lines, searched


def baseline_run(
    engines: list[chess.engine.SimpleEngine], rows: list[dict[str, Any]], nodes: int
) -> dict[str, Any]:
    """Every engine in its own thread over every ``len(engines)``-th position, timed until the last ends."""
    shares = [rows[i :: len(engines)] for i in range(len(engines))]
    with ThreadPoolExecutor(max_workers=len(engines)) as threads:
        started = time.perf_counter()
        counts = list(threads.map(plain_loop, engines, shares, [nodes] * len(engines)))
        seconds = time.perf_counter() - started
    lines, searched = (sum(c) for c in zip(*counts, strict=True))
    return {
        "nodes_per_position": searched / len(rows),
        "positions": len(rows),
        "lines": lines,
        "seconds": seconds,
        "positions_per_s": len(rows) / seconds,
    }


# ---------------------------------------------------------------------------------------------
# measured: the phase's engine work on the spread pool


def measured_run(pool: Any, rows: list[dict[str, Any]], nodes: int) -> dict[str, Any]:
    """One ``annotate_rows`` call over ``rows``, with the pool's cache hits and searches it caused."""
    from pipelines.annotate import annotate_rows

    before = pool.stats()
    cpu_started = time.process_time()
    started = time.perf_counter()
    out, moves = annotate_rows(pool, rows, nodes, "games")
    seconds = time.perf_counter() - started
    driver_cpu = time.process_time() - cpu_started
    after = pool.stats()
    if len(out) != len(rows):
        raise SystemExit(f"annotate_rows gave {len(out)} rows for {len(rows)} positions")
    return {
        "positions": len(rows),
        "moves": moves,
        "nodes_per_position": sum(r["nodes"] for r in out) / len(rows),
        "seconds": seconds,
        "positions_per_s": len(rows) / seconds,
        "driver_cpu_seconds": driver_cpu,
        "lines": moves - sum(r["unscored"] for r in out),  # moves the search reported
        "cache_hits": after["cache_hits"] - before["cache_hits"],
        "searched": after["searched"] - before["searched"],
    }


def print_run(label: str, r: dict[str, Any]) -> None:
    print(
        f"  {label:<22} {r['positions']:>6,} positions in {r['seconds']:7.2f} s = {r['positions_per_s']:8.1f}/s "
        f"({r['lines'] / r['positions']:.1f} moves reported, {r['nodes_per_position']:,.0f} nodes each)"
        f"  (other load {fmt_load(r['other_load_cores'])})"
    )


def alternate_runs(
    raw: list[chess.engine.SimpleEngine],
    pool: Any,
    slices: list[list[dict[str, Any]]],
    warm: list[dict[str, Any]],
    nodes: int,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A warm-up of both sides (untimed), then baseline and measured in turn, repeat ``i`` on slice ``i``."""
    baseline_run(raw, warm, nodes)
    measured_run(pool, warm, nodes)
    baseline: list[dict[str, Any]] = []
    measured: list[dict[str, Any]] = []
    for i, rows in enumerate(slices):
        baseline.append(timed(baseline_run, raw, rows, nodes))
        print_run(f"repeat {i + 1} baseline", baseline[-1])
        measured.append(timed(measured_run, pool, rows, nodes))
        print_run(f"repeat {i + 1} annotate_rows", measured[-1])
        if measured[-1]["cache_hits"]:
            raise SystemExit(
                f"the pool's cache answered {measured[-1]['cache_hits']} positions: not a fair run"
            )
    return baseline, measured


def ceiling_runs(
    pool: Any, slices: list[list[dict[str, Any]]], nodes: int, repeats: int
) -> list[dict[str, Any]]:
    """``annotate_rows`` over every slice again, ``repeats`` times: every answer from the actors'
    cache (each run checked: all hits, nothing searched)."""
    rows = [row for rows in slices for row in rows]
    runs = []
    for i in range(repeats):
        run = timed(measured_run, pool, rows, nodes)
        if run["cache_hits"] != len(rows) or run["searched"]:
            raise SystemExit(
                f"the ceiling pass searched {run['searched']} positions ({run['cache_hits']} cache hits of "
                f"{len(rows)}): the engines did not answer instantly"
            )
        print_run(f"ceiling {i + 1} (cached)", run)
        runs.append(run)
    return runs


def measure(
    args: argparse.Namespace, stockfish: str, slices: list[list[dict[str, Any]]], warm: list[dict[str, Any]]
) -> dict[str, Any]:
    """Both sides' runs and the ceiling runs on an embedded Ray of ``--engines`` CPUs."""
    from actors.engine_pool import EnginePool
    from cluster.runtime import ray_session

    with contextlib.ExitStack() as stack:
        raw = [open_raw_engine(stockfish) for _ in range(args.engines)]
        for engine in raw:
            stack.callback(engine.quit)
        started = time.perf_counter()
        ray_info = stack.enter_context(
            ray_session(RaySection(num_cpus=args.engines, object_store_gb=OBJECT_STORE_GB))
        )
        ray_init_s = time.perf_counter() - started
        started = time.perf_counter()
        pool = EnginePool.spread(args.engines, run="bench-annotate", key="--engines")
        stack.callback(pool.shutdown)
        startup_s = time.perf_counter() - started
        print(
            f"ray.init {ray_init_s:.2f} s ({ray_info.resources.get('CPU', 0):.0f} CPUs); pool start-up "
            f"({len(pool.actors)} actor(s), {pool.engines} engines) {startup_s:.2f} s; neither in the ratio"
        )
        baseline, measured = alternate_runs(raw, pool, slices, warm, args.nodes)
        ceiling = ceiling_runs(pool, slices, args.nodes, args.repeats)
        restarts = int(pool.stats().get("restarts", 0))
    return {
        "baseline": baseline,
        "measured": measured,
        "ceiling": ceiling,
        "ray_init_seconds": ray_init_s,
        "pool_startup_seconds": startup_s,
        "engine_restarts": restarts,
    }


# ---------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The bench's flags, checked."""
    from actors.engine_pool import PoolSettings

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--positions", type=int, default=300, help="positions per repeat, each repeat its own [default: 300]"
    )
    parser.add_argument(
        "--nodes",
        type=int,
        default=100,
        help="Stockfish nodes for each legal move (the phase's --nodes) [default: 100]",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="runs of each side, and ceiling passes; medians reported [default: 3]",
    )
    parser.add_argument(
        "--engines", type=int, default=2, help="Stockfish processes on each side, and Ray's CPUs [default: 2]"
    )
    parser.add_argument("--seed", type=int, default=0, help="position sampling seed [default: 0]")
    parser.add_argument(
        "--pgn", default=str(PGN), help="games to take positions from [default: the lichess sample]"
    )
    parser.add_argument("--json", default=str(RESULTS / "annotate.json"), help="where the JSON record goes")
    args = parser.parse_args(argv)
    if min(args.positions, args.nodes, args.repeats, args.engines) < 1:
        parser.error("--positions, --nodes, --repeats and --engines must be >= 1")
    if args.positions * args.repeats + WARM_POSITIONS > PoolSettings.cache_size:
        parser.error(
            f"--positions x --repeats must fit the pool's cache ({PoolSettings.cache_size:,}) for the ceiling"
        )
    return args


def report(args: argparse.Namespace, stockfish: str, runs: dict[str, Any], load: tuple[float, float]) -> None:
    """The medians, the ceiling line, the load warning, the JSON record and the ratio line."""
    base = statistics.median(r["positions_per_s"] for r in runs["baseline"])
    meas = statistics.median(r["positions_per_s"] for r in runs["measured"])
    ceiling = statistics.median(r["positions_per_s"] for r in runs["ceiling"])
    driver_cpu_ms = 1000 * statistics.median(
        r["driver_cpu_seconds"] / r["positions"] for r in runs["ceiling"]
    )
    ratio = meas / base if base else 0.0
    nodes_worth = ceiling / meas if meas else 0.0
    print(
        f"median baseline ({args.engines} plain loops) {base:,.1f} positions/s; "
        f"median annotate_rows on the pool {meas:,.1f} positions/s"
    )
    print(
        f"driver ceiling {ceiling:,.0f} positions/s = {nodes_worth:,.0f} nodes of {args.engines} CPUs at "
        f"{args.nodes:,} nodes a move (target >= {CEILING_TARGET_NODES}); driver CPU {driver_cpu_ms:.2f} ms a "
        f"position (alone: {1000 / driver_cpu_ms if driver_cpu_ms else 0:,.0f} positions/s)"
    )
    loads = [
        r["other_load_cores"]
        for k in ("baseline", "measured")
        for r in runs[k]
        if r["other_load_cores"] is not None
    ]
    if loads and max(loads) > 0.25:
        print(
            f"warning: other processes kept up to {max(loads):.2f} cores busy during the runs ({os.cpu_count()} CPUs)"
        )
    record = {
        "bench": "annotate",
        "ratio_definition": (
            f"median positions/s of pipelines.annotate.annotate_rows on EnginePool.spread({args.engines}) "
            f"(embedded Ray of {args.engines} CPUs) / median positions/s of {args.engines} python-chess "
            "SimpleEngines in plain loops, one thread each; MultiPV 500, nodes x legal moves, cleared hash"
        ),
        "ceiling_definition": (
            "annotate_rows positions/s with every answer from the actors' cache; nodes' worth = ceiling / measured"
        ),
        "pgn": args.pgn,
        "seed": args.seed,
        "nodes_per_move": args.nodes,
        "positions": args.positions,
        "repeats": args.repeats,
        "engines": args.engines,
        "hash_mb": HASH_MB,
        "stockfish": stockfish,
        "runs": {k: runs[k] for k in ("baseline", "measured", "ceiling")},
        "medians": {
            "baseline_positions_per_s": base,
            "measured_positions_per_s": meas,
            "ceiling_positions_per_s": ceiling,
            "ceiling_driver_cpu_ms_per_position": driver_cpu_ms,
        },
        "ceiling_nodes_worth": nodes_worth,
        "ceiling_target_nodes": CEILING_TARGET_NODES,
        "ray_init_seconds": runs["ray_init_seconds"],
        "pool_startup_seconds": runs["pool_startup_seconds"],
        "engine_restarts": runs["engine_restarts"],
        "ratio": ratio,
        "target": TARGET,
        "passed": ratio >= TARGET,
        "load_average_before": list(load),
    }
    write_record(args.json, record)
    print(f"annotate ratio: {ratio:.2f} (target >= {TARGET})")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.pop("RAY_ADDRESS", None)  # always the bench's own embedded Ray
    from chessrl.engine.client import find_stockfish

    stockfish = find_stockfish()
    rows = position_rows(
        sample_positions(Path(args.pgn), args.positions * args.repeats + WARM_POSITIONS, args.seed)
    )
    warm, rows = rows[:WARM_POSITIONS], rows[WARM_POSITIONS:]
    slices = [rows[i * args.positions : (i + 1) * args.positions] for i in range(args.repeats)]
    load1, load5, _ = os.getloadavg()
    print(
        f"positions: {args.positions:,} per repeat x {args.repeats}, distinct, from {args.pgn}; every legal move "
        f"at {args.nodes:,} nodes (MultiPV {ALL_MOVES_MULTIPV}); {args.engines} engines; engine {stockfish}"
    )
    print(
        f"machine: {os.cpu_count()} CPU(s), {platform.processor() or platform.machine()}; "
        f"load average before: {load1:.2f} (1 min), {load5:.2f} (5 min)"
    )
    runs = measure(args, stockfish, slices, warm)
    report(args, stockfish, runs, (load1, load5))
    return 0


if __name__ == "__main__":
    sys.exit(main())
