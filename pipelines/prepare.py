"""``prepare``: PGN files (plain or ``.pgn.zst``, local or S3) -> the games Parquet table.

    python -m pipelines.prepare --config tiny
    chess-rl prepare --input lichess_db_standard_rated_2024-01.pgn.zst --min-elo 2000 --storage s3://chess-runs

The Ray Data graph, streaming end to end (a 30 GB dump is never held in memory)::

    files --(read: decompress, split into raw games; ~1/50 of the work)--> blocks of raw games
          --(limit max_games)--> --(parse: python-chess, filter, write one Parquet shard per batch)-->
          one stats row per shard --> the driver adds the counts up and prints the summary

Each shard is written whole and then renamed (local) or uploaded in one go (S3), so a reader
never sees half a file. Bad games are skipped and counted by reason (``chessrl.pgn.SKIP_REASONS``);
a file that cannot be read to its end (truncated or corrupt ``.zst``, a vanished object) keeps
the games before the damage and is listed under ``file_errors``.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import sys
import time
import warnings
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from chessrl.engine import find_stockfish
from chessrl.engine_games import GeneratorSettings, generate_games
from chessrl.games import GameRecord, records_to_table
from chessrl.pgn import GameFilter, PGNStreamError, PrepareCounts, game_record, iter_raw_games, open_pgn
from cluster.errors import StorageError
from cluster.storage import Storage, resolve_inputs, split_uri
from pipelines.config import PrepareConfig
from pipelines.phase import Phase, PhaseContext, PhaseResult, run_phase

PGN_SUFFIXES = (".pgn", ".pgn.zst")
RAW_BLOCK_GAMES = 500  # raw games per table the read stage yields
# Ray Data merges yielded tables into blocks of up to 128 MiB by default: one block (so one parse
# task, one CPU) per ordinary file. Small blocks let a single big file feed every parse task.
RAW_BLOCK_BYTES = 512 * 1024
_SHARD_NAME = re.compile(r"part-\d{5}-\d{9}\.parquet")

RAW_SCHEMA = pa.schema(
    [
        pa.field("file_index", pa.int32()),
        pa.field("game_index", pa.int64()),
        pa.field("source", pa.string()),
        pa.field("raw", pa.binary()),
        pa.field("error", pa.string()),
    ]
)
STATS_SCHEMA = pa.schema([pa.field("shard", pa.string()), pa.field("counts", pa.string())])


# ---------------------------------------------------------------------------------------------
# the two stages (plain functions: unit-testable without Ray)


def read_raw_games(batch: pa.Table, block_games: int = RAW_BLOCK_GAMES) -> Iterator[pa.Table]:
    """Read stage: each input row (file_index, uri, source) -> blocks of raw games.

    A file that cannot be opened or read to its end yields one row with ``error`` set.
    """
    for row in batch.to_pylist():
        yield from _read_file(int(row["file_index"]), str(row["uri"]), str(row["source"]), block_games)


def _read_file(file_index: int, uri: str, source: str, block_games: int) -> Iterator[pa.Table]:
    rows: dict[str, list[Any]] = {name: [] for name in RAW_SCHEMA.names}
    game_index = 0

    def add(raw: bytes, error: str | None) -> None:
        nonlocal game_index
        rows["file_index"].append(file_index)
        rows["game_index"].append(game_index)
        rows["source"].append(source)
        rows["raw"].append(raw)
        rows["error"].append(error)
        game_index += 1

    try:
        storage, name = split_uri(uri)
        with storage.open_input(name) as stream:
            for raw in iter_raw_games(open_pgn(stream, name)):
                add(raw, None)
                if len(rows["raw"]) >= block_games:
                    yield pa.Table.from_pydict(rows, schema=RAW_SCHEMA)
                    for column in rows.values():
                        column.clear()
    except (PGNStreamError, StorageError) as exc:
        add(b"", str(exc))
    except OSError as exc:  # a read that failed half-way (network, permissions)
        add(b"", f"read failed: {exc}")
    if rows["raw"]:
        yield pa.Table.from_pydict(rows, schema=RAW_SCHEMA)


def parse_and_write(batch: pa.Table, output_uri: str, game_filter: GameFilter) -> pa.Table:
    """Parse stage: raw games -> one Parquet shard of kept games + one stats row."""
    counts = PrepareCounts()
    records = []
    columns = batch.select(["file_index", "game_index", "source", "raw", "error"]).to_pydict()
    for source, raw, error in zip(columns["source"], columns["raw"], columns["error"], strict=False):
        if error is not None:
            counts.stream_error(source, error)
            continue
        record = game_record(raw, source, game_filter, counts)
        if record is not None:
            records.append(record)
    shard = ""
    if records:
        shard = f"part-{columns['file_index'][0]:05d}-{columns['game_index'][0]:09d}.parquet"
        buffer = io.BytesIO()
        pq.write_table(records_to_table(records), buffer, compression="zstd")
        Storage.from_uri(output_uri).write_bytes(shard, buffer.getvalue())
    return pa.Table.from_pydict(
        {"shard": [shard], "counts": [json.dumps(counts.as_dict())]}, schema=STATS_SCHEMA
    )


# ---------------------------------------------------------------------------------------------
# the phase


def output_storage(context: PhaseContext) -> Storage:
    cfg = context.config.prepare
    return Storage.from_uri(cfg.output) if cfg.output else context.phase_storage("prepare").child("games")


def clear_output(out: Storage) -> int:
    """Remove the shards of an earlier run; refuse a folder holding anything else."""
    if not out.exists():
        return 0
    if not out.is_dir():
        raise StorageError(f"prepare output {out.uri} is a file; give a folder")
    existing = out.list_files()
    foreign = [f for f in existing if not (_SHARD_NAME.fullmatch(f) or f.startswith("."))]
    if foreign:
        raise StorageError(
            f"prepare output {out.uri} holds files prepare did not write (e.g. {foreign[0]!r}); "
            "choose an empty or new folder"
        )
    for name in existing:
        out.delete(name)
    return len(existing)


def game_filter_of(cfg: PrepareConfig) -> GameFilter:
    return GameFilter(
        min_elo=cfg.min_elo,
        time_controls=tuple(cfg.time_controls),
        terminations=tuple(t.lower() for t in cfg.terminations),
        min_plies=cfg.min_plies,
    )


def generator_settings(context: PhaseContext) -> GeneratorSettings:
    cfg = context.config.prepare
    return GeneratorSettings(
        games=cfg.generate,
        seed=context.config.run.seed,
        random_plies=cfg.generate_random_plies,
        nodes_levels=tuple(cfg.generate_nodes),
        temperature=cfg.generate_temperature,
        multipv=cfg.generate_multipv,
        max_plies=cfg.generate_max_plies,
    )


def run_generate(
    context: PhaseContext, out: Storage, file_index: int
) -> tuple[PrepareCounts, list[str], float, Counter[str]]:
    """Play ``prepare.generate`` games through an EnginePool; write shards and a PGN export."""
    import ray

    from actors.engine_pool import EnginePool, PoolSettings

    cfg = context.config.prepare
    settings = generator_settings(context)
    if context.ray.mode == "embedded":
        find_stockfish()  # same machine as the actors: a missing engine is one clear line, before any actor starts
    engines = cfg.engines or max(1, int(ray.cluster_resources().get("CPU", 1)))
    started = time.perf_counter()
    pool = EnginePool.create(
        n_actors=1,
        engines_per_actor=engines,
        run=context.config.run.name,
        settings=PoolSettings(engines_per_actor=engines),
    )
    context.log(
        f"generating {settings.games} games with {engines} Stockfish process(es): nodes {list(settings.nodes_levels)}, "
        f"{settings.random_plies[0]}-{settings.random_plies[1]} random opening plies, seed {settings.seed}"
    )
    counts = PrepareCounts()
    terminations: Counter[str] = Counter()
    shards: list[str] = []
    batch: list[GameRecord] = []
    pgn_parts: list[str] = []
    first_index = 0
    last_report = started

    def flush() -> None:
        nonlocal first_index, batch
        if batch:
            name = f"part-{file_index:05d}-{first_index:09d}.parquet"
            buffer = io.BytesIO()
            pq.write_table(records_to_table(batch), buffer, compression="zstd")
            out.write_bytes(name, buffer.getvalue())
            shards.append(name)
            first_index += len(batch)
            batch = []

    try:
        for game in generate_games(
            settings, lambda fens, limit, mpv: pool.analyse(fens, limit, mpv, fresh=True)
        ):
            record = game.record()
            batch.append(record)
            pgn_parts.append(game.pgn())
            counts.read += 1
            counts.written += 1
            counts.plies_written += record.n_plies
            counts.results[record.result] += 1
            terminations[record.termination] += 1
            if len(batch) >= cfg.shard_games:
                flush()
            now = time.perf_counter()
            if now - last_report > 10:
                last_report = now
                rate = counts.written / (now - started)
                context.log(f"{counts.written}/{settings.games} games generated ({rate:.1f} games/s)")
        flush()
        stats = pool.stats()
    finally:
        pool.shutdown()
    context.phase_storage("prepare").write_text("generated.pgn", "\n\n".join(pgn_parts) + "\n")
    seconds = time.perf_counter() - started
    context.log(
        f"generated {counts.written} games in {seconds:.1f} s "
        f"({stats['searched']:,} searches, {stats['restarts']} engine restarts)"
    )
    return counts, shards, seconds, terminations


def run_prepare(context: PhaseContext) -> PhaseResult:
    cfg = context.config.prepare
    log = context.log
    files = resolve_inputs(cfg.inputs, PGN_SUFFIXES) if cfg.inputs else []
    out = output_storage(context)
    removed = clear_output(out)
    out.makedirs()
    log(
        f"{len(files)} input file(s) -> {out.uri}" + (f" (replaced {removed} old file(s))" if removed else "")
    )

    started = time.perf_counter()
    total = PrepareCounts()
    shards: list[str] = []
    generated: dict[str, Any] = {}
    if cfg.generate:
        counts, gen_shards, gen_seconds, terminations = run_generate(context, out, file_index=len(files))
        total, shards = total + counts, shards + gen_shards
        generated = {
            "games": counts.written,
            "seconds": round(gen_seconds, 3),
            "mean_plies": round(counts.plies_written / max(1, counts.written), 2),
            "results": dict(sorted(counts.results.items())),
            "terminations": dict(terminations.most_common()),
            "pgn": context.phase_storage("prepare").uri_of("generated.pgn"),
        }
    if files:
        counts, file_shards = read_and_parse(context, files, out)
        total, shards = total + counts, shards + file_shards
    seconds = time.perf_counter() - started

    summary = build_summary(total, files=files, shards=sorted(shards), output=out.uri, seconds=seconds)
    summary["generated"] = generated
    context.phase_storage("prepare").write_text("summary.json", json.dumps(summary, indent=2, sort_keys=True))
    context.tracking.log_metrics(summary_metrics(summary))
    lines = summary_lines(summary)
    ok = total.written > 0
    if not ok:
        lines.append("prepare wrote no games: see the skip reasons and file errors above")
    return PhaseResult(summary=summary, lines=lines, ok=ok)


def read_and_parse(
    context: PhaseContext, files: list[tuple[str, str]], out: Storage
) -> tuple[PrepareCounts, list[str]]:
    """The Ray Data graph over PGN files; returns the added-up counts and the shards written."""
    import ray
    import ray.data

    cfg = context.config.prepare
    log = context.log

    data_context = ray.data.DataContext.get_current()
    data_context.enable_progress_bars = sys.stderr.isatty()
    data_context.print_on_execution_start = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    logging.getLogger("ray.data._internal.progress").setLevel(logging.ERROR)  # "progress bars disabled"
    # Small inputs give fewer blocks than parse tasks; that is expected, not worth a warning.
    warnings.filterwarnings("ignore", message="The maximum number of concurrent tasks", category=UserWarning)

    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    parse_tasks = min(cfg.parallelism or cpus, cpus)
    items = [{"file_index": i, "uri": uri, "source": source} for i, (uri, source) in enumerate(files)]
    ds = ray.data.from_items(items, override_num_blocks=len(items))
    ds.context.target_max_block_size = RAW_BLOCK_BYTES  # this dataset only, not the process-wide default
    ds = ds.map_batches(
        read_raw_games,
        batch_format="pyarrow",
        batch_size=1,
        num_cpus=0,  # light next to parsing; capped below so readers never crowd out parsers
        compute=ray.data.TaskPoolStrategy(size=max(1, min(len(files), cpus // 2 or 1))),
    )
    if cfg.max_games:
        ds = ds.limit(cfg.max_games)
    ds = ds.map_batches(
        parse_and_write,
        batch_format="pyarrow",
        batch_size=cfg.shard_games,
        fn_kwargs={"output_uri": out.uri, "game_filter": game_filter_of(cfg)},
        num_cpus=1,
        compute=ray.data.TaskPoolStrategy(size=parse_tasks),
    )

    started = time.perf_counter()
    total = PrepareCounts()
    shards: list[str] = []
    last_report = started
    for row in ds.iter_rows():
        total = total + PrepareCounts.from_dict(json.loads(row["counts"]))
        if row["shard"]:
            shards.append(row["shard"])
        now = time.perf_counter()
        if now - last_report > 5:
            last_report = now
            log(
                f"{total.read:,} games read, {total.written:,} written, {total.read / (now - started):,.0f} games/s"
            )
            context.tracking.log_metrics(
                {"games_read": total.read, "games_written": total.written}, step=total.read
            )
    return total, shards


def build_summary(
    counts: PrepareCounts,
    *,
    files: Sequence[tuple[str, str]],
    shards: Sequence[str],
    output: str,
    seconds: float,
) -> dict[str, Any]:
    data = counts.as_dict()
    written = counts.written
    return {
        "phase": "prepare",
        "inputs": [source for _, source in files],
        "output": output,
        "shards": list(shards),
        "games_read": counts.read,
        "games_written": written,
        "games_skipped": sum(counts.skipped.values()),
        "skipped": data["skipped"],
        "skip_examples": data["examples"],
        "file_errors": data["file_errors"],
        "recoded_non_utf8": counts.recoded_non_utf8,
        "missing_headers": counts.missing_headers,
        "mean_plies": round(counts.plies_written / written, 2) if written else 0.0,
        "results": data["results"],
        "seconds": round(seconds, 3),
        "games_per_second": round(counts.read / seconds, 1) if seconds > 0 else 0.0,
    }


def summary_metrics(summary: dict[str, Any]) -> dict[str, float]:
    metrics = {
        key: float(summary[key])
        for key in (
            "games_read",
            "games_written",
            "games_skipped",
            "mean_plies",
            "games_per_second",
            "recoded_non_utf8",
        )
    }
    metrics["shards"] = float(len(summary["shards"]))
    metrics["file_errors"] = float(len(summary["file_errors"]))
    metrics.update({f"skipped_{reason}": float(n) for reason, n in summary["skipped"].items()})
    return metrics


def summary_lines(summary: dict[str, Any]) -> list[str]:
    written = summary["games_written"]
    results = summary["results"]
    result_mix = (
        ", ".join(
            f"{label} {100 * results.get(key, 0) / written:.1f}%"
            for key, label in (("1-0", "white"), ("0-1", "black"), ("1/2-1/2", "draw"), ("*", "unfinished"))
            if results.get(key)
        )
        if written
        else "-"
    )
    skipped = ", ".join(f"{reason} {n:,}" for reason, n in summary["skipped"].items()) or "none"
    lines = [
        "prepare summary",
        f"  inputs        {len(summary['inputs'])} file(s)"
        + (f" + {summary['generated']['games']:,} generated games" if summary.get("generated") else ""),
        f"  games read    {summary['games_read']:,} in {summary['seconds']:.1f} s ({summary['games_per_second']:,.0f} games/s)",
        f"  written       {written:,} games in {len(summary['shards'])} Parquet file(s) -> {summary['output']}",
        f"  skipped       {summary['games_skipped']:,} ({skipped})",
        f"  mean plies    {summary['mean_plies']:.1f}",
        f"  results       {result_mix}",
    ]
    if summary["recoded_non_utf8"] or summary["missing_headers"]:
        lines.append(
            f"  notes         {summary['recoded_non_utf8']:,} game(s) read as Latin-1 (not UTF-8), "
            f"{summary['missing_headers']:,} with missing White/Black/Result headers"
        )
    if summary.get("generated"):
        gen = summary["generated"]
        mix = ", ".join(f"{k} {v}" for k, v in gen["results"].items())
        ends = ", ".join(f"{k} {v}" for k, v in gen["terminations"].items())
        lines += [
            f"  generated     {gen['games']:,} Stockfish games in {gen['seconds']:.1f} s, mean plies {gen['mean_plies']:.1f}",
            f"                results {mix}; ended by {ends}",
            f"                PGN {gen['pgn']}",
        ]
    for error in summary["file_errors"][:10]:
        lines.append(f"  file error    {error}")
    if len(summary["file_errors"]) > 10:
        lines.append(f"  file error    ... and {len(summary['file_errors']) - 10} more (see summary.json)")
    for reason, example in summary["skip_examples"].items():
        lines.append(f"  e.g. {reason:<14}{example}")
    return lines


PHASE = Phase(
    name="prepare",
    summary="prepare: PGN games (files, folders, globs; .pgn or .pgn.zst; local or s3://) -> games Parquet.",
    description=(
        "Streams every input through Ray Data: read and split, parse with python-chess in parallel, filter,\n"
        "write Parquet shards under <storage>/<run>/prepare/games, and print what was read, written and\n"
        "skipped (by reason). Example:\n"
        "  chess-rl prepare --inputs games/*.pgn.zst --min-elo 2000 --time-controls blitz rapid classical"
    ),
    section="prepare",
    section_model=PrepareConfig,
    run=run_prepare,
)


def main(argv: Sequence[str] | None = None, *, prog: str | None = None) -> int:
    return run_phase(PHASE, argv, prog=prog)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
