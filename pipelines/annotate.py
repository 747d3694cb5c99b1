"""``annotate``: positions -> Stockfish's value of every legal move (the engine-annotated table).

    python -m pipelines.annotate --config tiny
    chess-rl annotate --sources games policy random --positions 20000 --nodes 100
    chess-rl annotate --policy runs/demo/grpo/model --sources policy --run-name dagger-2
    ray job submit --working-dir . -- python -m pipelines.annotate --config cluster --engines 64

Positions come from the configured ``sources``, ``positions`` from each:

- ``games``: the games table's training games (sft's split by game id; held-out games give only
  the ``heldout_positions``, written apart and never trained on), by game phase 20/60/20;
- ``policy``: games the policy plays, its moves drawn from its legal moves only (masked), against
  ``policy_opponents`` (a random mover, its own masked argmax, itself), each continued from a
  training game's position: the positions the policy actually reaches (DAgger), made by
  ``policy_workers`` Ray tasks while the engines annotate the other shards;
- ``random``: games between two random movers (the chaos a random opponent makes);
- ``lopsided``: games between a one-ply material grabber that mates when it can and a random
  mover (:func:`chessrl.data.positions.lopsided_game_moves`; ~3 in 4 end in mate): positions
  where one side is far ahead or a mate is near, which human games rarely hold, drawn twice as
  often from a game's second half;
- ``engine``: Stockfish against a random mover on the same engine pool
  (:func:`chessrl.engine.engine_games.random_opponent_games`), positions drawn as for lopsided.

Each position gets one Stockfish search that lists every legal move (MultiPV, ``nodes`` for each
legal move: :mod:`chessrl.engine.annotation`), on an :class:`actors.engine_pool.EnginePool`
spread over the cluster's nodes (one actor a node, its share of ``engines``). Shards are written
whole (``<storage>/<run>/annotate/{train,heldout}/<source>-NNNNN.parquet``, the schema
:data:`chessrl.engine.annotation.ANNOTATION_SCHEMA`) with ``manifest.json`` after each one, so a
killed run's same command keeps the shards it wrote and makes only the rest; a re-run with other
settings is refused (a new ``--run-name``, or delete the folder). Colour flips are left to the
trainers (:meth:`chessrl.engine.annotation.Annotation.mirrored`). Beside each shard, ``pairs`` preference
pairs a position (``<run>/annotate/pairs/...``, the preference schema: Stockfish's best move
against a random legal move, and two moves apart) for a judge: ``chess-rl reward --preferences
<run>/annotate/pairs --text-format board-after``. ``summary.json``: positions by source and
phase, moves scored, pairs, positions/s, engine restarts.
"""

from __future__ import annotations

import io
import json
import sys
import time
from collections import Counter
from typing import Any

from chessrl.engine.annotation import ANNOTATION_SCHEMA
from chessrl.rl.preferences import PREFERENCE_SCHEMA, annotation_pairs, board_key
from cluster.capacity import sizing_cpus
from cluster.errors import ConfigError, StorageError
from cluster.storage import Storage
from pipelines.annotate_sources import AnnotateInputs, PolicyTasks, PositionSource, ShardPlan
from pipelines.cli import one_line
from pipelines.common.artifacts import games_table
from pipelines.common.phase import Inputs, Phase, PhaseContext, PhaseResult, model_location, readable_model
from pipelines.config import AnnotateConfig, ChessRLConfig

SUMMARY = one_line("annotate")
DESCRIPTION = (
    "One MultiPV search a position scores every legal move (--nodes for each) on engine actors\n"
    "spread over the nodes. Shards are written whole; the same command resumes. Examples:\n"
    "  chess-rl annotate --sources games random --positions 4000 --nodes 100\n"
    "  chess-rl annotate --sources policy --policy runs/demo/sft-board/model --policy-opponents random self"
)


def check_annotate(config: ChessRLConfig, inputs: Inputs) -> AnnotateInputs:
    """Every input of ``annotate``, before Ray starts: Stockfish, the games table (``game_id`` and ``moves``,
    at least one game) when the games, policy or held-out positions need it, and the policy's
    saved weights for the policy source."""
    from chessrl.engine.client import find_stockfish

    cfg = config.annotate
    find_stockfish()  # a missing engine is one clear line before any work
    if cfg.whole_games and "engine" in cfg.sources:
        raise ConfigError(
            "annotate.sources: engine gives drawn positions only; with whole_games use games, random or lopsided"
        )
    games = None
    if {"games", "policy"} & set(cfg.sources) or cfg.heldout_positions:
        games = Storage.from_uri(cfg.games or inputs.folder("prepare").uri_of("games"))
        if cfg.games or not inputs.will_write("prepare"):
            games_table(games)
    policy = None
    if "policy" in cfg.sources:
        policy = model_location(
            cfg.policy,
            inputs.folder("sft-board").child("model"),
            "annotate.policy (--policy)",
            "sft --text-format board",
            produced=inputs.will_write("sft-board"),
        )
        if cfg.policy or not inputs.will_write("sft-board"):
            readable_model(policy, "annotate.policy (--policy)")
    return AnnotateInputs(games, policy)


def plan_shards(cfg: AnnotateConfig) -> list[ShardPlan]:
    """The shards of every source, then the held-out ones, ``shard_positions`` each (the last of
    a source holds the rest).

    >>> from pipelines.config import AnnotateConfig
    >>> [(s.name, s.count) for s in plan_shards(AnnotateConfig(sources=["random"], positions=5, shard_positions=2, heldout_positions=1))]
    [('train/random-00000.parquet', 2), ('train/random-00001.parquet', 2), ('train/random-00002.parquet', 1), ('heldout/games-00000.parquet', 1)]
    """
    plans: list[ShardPlan] = []
    for split, source, total in [
        *(("train", s, cfg.positions) for s in cfg.sources),
        ("heldout", "games", cfg.heldout_positions),
    ]:
        for index, start in enumerate(range(0, total, cfg.shard_positions)):
            plans.append(
                ShardPlan(
                    f"{split}/{source}-{index:05d}.parquet",
                    source,
                    index,
                    min(cfg.shard_positions, total - start),
                )
            )
    return plans


def settings_key(
    cfg: AnnotateConfig, found: AnnotateInputs, seed: int, heldout_fraction: float
) -> dict[str, Any]:
    """What decides a shard's contents: a re-run must match it to keep the shards written."""
    return {
        "seed": seed,
        "heldout_fraction": heldout_fraction,
        "nodes": cfg.nodes,
        "sources": list(cfg.sources),
        "positions": cfg.positions,
        "heldout_positions": cfg.heldout_positions,
        "shard_positions": cfg.shard_positions,
        "games": found.games.uri if found.games else None,
        "policy": found.policy,
        "policy_opponents": list(cfg.policy_opponents),
        "policy_temperature": cfg.policy_temperature,
        "max_plies": cfg.max_plies,
        "pairs": cfg.pairs,
        "pair_margin_cp": cfg.pair_margin_cp,
        **({"whole_games": True} if cfg.whole_games else {}),  # absent when off: older manifests still match
    }


def engine_count(cfg: AnnotateConfig, cpus: int, policy_games: bool, most: int | None = None) -> int:
    """Stockfish processes: ``engines``, else one a CPU of ``cpus``, less the ``policy_workers``
    tasks' CPUs with policy games to play; ``engines`` beside them must fit ``most`` (default
    ``cpus``; :func:`cluster.capacity.sizing_cpus` gives both for a cluster).

    >>> from pipelines.config import AnnotateConfig
    >>> engine_count(AnnotateConfig(), 8, False), engine_count(AnnotateConfig(), 8, True)
    (8, 7)
    """
    most = cpus if most is None else most
    workers = cfg.policy_workers if policy_games else 0
    if cfg.engines is None:
        return max(1, cpus - workers)
    if workers and cfg.engines + workers > most:
        raise ConfigError(
            f"annotate.engines {cfg.engines} and annotate.policy_workers {workers} need {cfg.engines + workers} "
            f"CPUs; the cluster has {most}: lower --engines to {max(1, most - workers)} or leave it unset"
        )
    return cfg.engines


def training_boards(out: Storage, plans: list[ShardPlan]) -> set[str]:
    """The board keys (placement, side, castling, en passant) of every written training shard."""
    import pyarrow.parquet as pq

    boards: set[str] = set()
    for plan in plans:
        if plan.name.startswith("train/") and out.exists(plan.name):
            fens = (
                pq.read_table(io.BytesIO(out.read_bytes(plan.name)), columns=["fen"])
                .column("fen")
                .to_pylist()
            )
            boards.update(board_key(f) for f in fens)
    return boards


def annotate_rows(
    pool: Any, positions: list[dict[str, Any]], nodes: int, source: str
) -> tuple[list[dict[str, Any]], int]:
    """Every position's annotation through the pool (one all-moves search each, annotated beside
    the engines: :meth:`actors.engine_pool.EnginePool.annotate`), as table rows; and the moves
    scored."""
    records = pool.annotate([p["fen"] for p in positions], nodes)
    rows = [
        record.row(
            source=source, game_id=p["game_id"], ply=p["ply"], phase=p["phase"], history=p.get("history")
        )
        for p, record in zip(positions, records, strict=True)
    ]
    return rows, sum(len(r.moves) for r in records)


def parquet_bytes(rows: list[dict[str, Any]], schema: Any = ANNOTATION_SCHEMA) -> bytes:
    """A shard's rows as Parquet (``schema``, zstd)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), buffer, compression="zstd")
    return buffer.getvalue()


def pair_rows(rows: list[dict[str, Any]], cfg: AnnotateConfig, split: str, seed: int) -> list[dict[str, Any]]:
    """The judge's preference pairs of a shard's positions (:func:`chessrl.rl.preferences.annotation_pairs`)."""
    import random

    rng = random.Random(seed)
    return [pair for row in rows for pair in annotation_pairs(row, cfg.pairs, cfg.pair_margin_cp, rng, split)]


def read_manifest(out: Storage, key: dict[str, Any]) -> dict[str, Any]:
    """The manifest of earlier runs into ``out`` (empty when none); one made with other settings
    is one clear error (its shards hold other positions)."""
    if not out.exists("manifest.json"):
        return {"settings": key, "shards": {}}
    manifest = json.loads(out.read_text("manifest.json"))
    if manifest.get("settings") != key:
        changed = sorted(k for k in key if manifest.get("settings", {}).get(k) != key[k])
        raise StorageError(
            f"{out.uri} holds annotations made with other settings ({', '.join(changed)} differ): "
            "pass another --run-name (or --storage), or delete that folder to start again"
        )
    return manifest


def write_shard(
    out: Storage,
    plan: ShardPlan,
    rows: list[dict[str, Any]],
    moves: int,
    cfg: AnnotateConfig,
    seed: int,
    manifest: dict[str, Any],
) -> None:
    """A shard written whole, its judge's pairs beside it (seeded by the shard), then the manifest."""
    split = plan.name.split("/")[0]
    out.write_bytes(plan.name, parquet_bytes(rows))
    if cfg.pairs:
        pairs = pair_rows(rows, cfg, split, seed * 7_919 + plan.index * 31 + (split == "heldout"))
        out.write_bytes(f"pairs/{plan.name}", parquet_bytes(pairs, PREFERENCE_SCHEMA))
    manifest["shards"][plan.name] = {"positions": len(rows), "moves": moves, "source": plan.source}
    out.write_text("manifest.json", json.dumps(manifest, indent=1, sort_keys=True))


def unscored(rows: list[dict[str, Any]]) -> int:
    """Legal moves the searches did not report (given the worst value): a Stockfish that ignored
    the MultiPV asked for, or a search cut short."""
    return sum(int(r["unscored"]) for r in rows)


def run_annotate(context: PhaseContext) -> PhaseResult:
    """check -> plan the shards -> start the policy tasks and the spread engine pool -> annotate
    and write every shard not yet written (the manifest after each) -> summarise."""
    import ray

    from actors.engine_pool import EnginePool

    cfg, seed = context.config.annotate, context.config.run.seed
    found = check_annotate(context.config, Inputs.of_context(context))
    out = context.phase_storage("annotate")
    key = settings_key(cfg, found, seed, context.config.sft.heldout_fraction)
    manifest = read_manifest(out, key)
    plans = plan_shards(cfg)
    pending = [
        p
        for p in plans
        if p.name not in manifest["shards"]
        or not out.exists(p.name)
        or (cfg.pairs and not out.exists(f"pairs/{p.name}"))
    ]
    source = PositionSource(cfg, found, context.config.sft.heldout_fraction, seed)
    cpus, most = sizing_cpus(int(ray.cluster_resources().get("CPU", 1)))
    engines = engine_count(cfg, cpus, any(p.source == "policy" for p in pending), most)
    context.log(
        f"{len(plans)} shards ({len(plans) - len(pending)} already written, {len(pending)} to make): "
        f"{cfg.positions:,} positions from each of {', '.join(cfg.sources)}, {cfg.heldout_positions:,} held out; "
        f"every legal move at {cfg.nodes:,} nodes, {engines} Stockfish process(es)"
        + (f"; policy {found.policy}" if found.policy else "")
    )
    started = time.perf_counter()
    made = scored = 0
    if pending:
        policy = PolicyTasks(cfg, found, source, pending, seed)
        pool = EnginePool.spread(
            engines, run=f"{context.config.run.name}-annotate", key="annotate.engines", log=context.log
        )
        source.analyse = lambda fens, limits, multipv: pool.analyse(fens, limits, multipv=multipv, fresh=True)
        try:
            held_out_of: set[str] | None = None  # the training shards' boards, read once
            for done_now, plan in enumerate(pending):
                split = plan.name.split("/")[0]
                if plan.source == "policy" and split == "train":
                    positions = policy.positions(plan)
                elif split == "heldout":  # after every training shard (the plan's order)
                    held_out_of = training_boards(out, plans) if held_out_of is None else held_out_of
                    positions = source.local(plan, split, exclude=held_out_of)
                else:
                    positions = source.local(plan, split)
                rows, moves = annotate_rows(
                    pool, positions, cfg.nodes, plan.source if split == "train" else "heldout"
                )
                write_shard(out, plan, rows, moves, cfg, seed, manifest)
                made, scored = made + len(rows), scored + moves
                elapsed = max(1e-9, time.perf_counter() - started)
                context.log(
                    f"{plan.name}: {len(rows)} positions, {moves:,} moves scored ({done_now + 1}/{len(pending)} shards, "
                    f"{made / elapsed:,.1f} positions/s, {scored / elapsed:,.0f} moves/s)"
                    + (
                        f"; warning: {u} legal moves not reported by the search"
                        if (u := unscored(rows))
                        else ""
                    )
                )
            restarts = int(pool.stats().get("restarts", 0))
        finally:
            pool.shutdown()
    else:
        restarts = 0
    seconds = time.perf_counter() - started
    summary = summarise(out, manifest, plans, made, scored, seconds, restarts, cfg)
    out.write_text("summary.json", json.dumps(summary, indent=2, sort_keys=True))
    context.tracking.log_metrics(
        {
            "positions": summary["positions_total"],
            "positions_per_s": summary["positions_per_s"],
            "moves_scored": scored,
        }
    )
    return PhaseResult(summary=summary, lines=summary_lines(summary, out), ok=True)


def summarise(
    out: Storage,
    manifest: dict[str, Any],
    plans: list[ShardPlan],
    made: int,
    scored: int,
    seconds: float,
    restarts: int,
    cfg: AnnotateConfig,
) -> dict[str, Any]:
    """Counts over every shard (by source and phase, from the tables), this run's speed."""
    import pyarrow.parquet as pq

    by_source: Counter[str] = Counter()
    by_phase: Counter[str] = Counter()
    moves = 0
    for plan in plans:
        table = pq.read_table(io.BytesIO(out.read_bytes(plan.name)), columns=["source", "phase", "moves"])
        by_source.update(table.column("source").to_pylist())
        by_phase.update(table.column("phase").to_pylist())
        moves += sum(len(m) for m in table.column("moves").to_pylist())
    return {
        "phase": "annotate",
        "settings": manifest["settings"],
        "shards": len(plans),
        "positions": dict(by_source),
        "phases": dict(by_phase),
        "positions_total": sum(by_source.values()),
        "moves_total": moves,
        "made_now": made,
        "moves_scored_now": scored,
        "seconds": round(seconds, 1),
        "positions_per_s": round(made / seconds, 2) if made and seconds > 0 else 0.0,
        "engine_restarts": restarts,
        "nodes_per_move": cfg.nodes,
        **(
            {
                "pairs_total": sum(
                    pq.read_metadata(io.BytesIO(out.read_bytes(f"pairs/{p.name}"))).num_rows for p in plans
                )
            }
            if cfg.pairs
            else {}
        ),
    }


def summary_lines(summary: dict[str, Any], out: Storage) -> list[str]:
    total = max(1, summary["positions_total"])
    return [
        "annotate summary",
        "  positions     "
        + ", ".join(f"{k} {v:,}" for k, v in sorted(summary["positions"].items()))
        + f" ({summary['moves_total']:,} moves scored, {summary['moves_total'] / total:.1f} a position)",
        "  phases        " + ", ".join(f"{k} {v:,}" for k, v in sorted(summary["phases"].items())),
        f"  speed         {summary['made_now']:,} positions made now in {summary['seconds']} s "
        f"({summary['positions_per_s']:.1f} positions/s at {summary['nodes_per_move']} nodes a move); "
        f"{summary['engine_restarts']} engine restarts",
        *(
            [f"  pairs         {summary['pairs_total']:,} for a judge (pairs/)"]
            if "pairs_total" in summary
            else []
        ),
        f"  output        {out.uri}",
    ]


PHASE = Phase(
    name="annotate",
    section="annotate",
    section_model=AnnotateConfig,
    run=run_annotate,
    check=check_annotate,
    summary=SUMMARY,
    description=DESCRIPTION,
)
main = PHASE.main
if __name__ == "__main__":
    sys.exit(main())
