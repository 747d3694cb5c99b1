"""``preferences``: Stockfish-judged preference pairs from the policy's own moves.

    python -m pipelines.preferences --config tiny
    chess-rl preferences --positions 20000 --k 4 --margin-cp 50 --samplers 2 --engines 6
    chess-rl preferences --policy s3://bucket/models/sft --games s3://bucket/games --storage s3://bucket/runs
    chess-rl preferences --judge model --reward-model runs/a/reward/model   # a trained judge ranks

Positions come from the games table, training pairs from the training games and held-out pairs
from the held-out games (sft's split, by game id; a held-out board also seen in training is left
out). For each shard of positions, :class:`actors.policy_sampler.PolicySampler` actors propose
``k`` moves a position in batched ``generate`` calls, each position asked in the policy's own
text format (the moves so far, or the board for a ``board``/RookWorld policy: its
``chessrl_text_format``; the table's ``prompt`` is the moves so far either way), while the :class:`actors.engine_pool.EnginePool`
finds Stockfish's move at ``nodes``; then the pool scores every distinct legal proposal (the
position after it, batched) and :func:`chessrl.rl.preferences.make_pairs` keeps a pair where the
proposal is ``margin_cp`` or more below Stockfish's move, or is no legal move at all (their share
capped by ``max_invalid_share``). With ``judge: model`` a trained reward model on
:class:`actors.reward_server.RewardServer` actors scores every legal move instead
(:func:`judge_pairs`) and no engine is started.

Each shard is written whole (``<storage>/<run>/preferences/{train,heldout}/shard-NNNNN.parquet``,
the schema :data:`chessrl.rl.preferences.PREFERENCE_SCHEMA`), so after a kill the same command keeps
the finished shards and does only the rest. ``summary.json``: pairs, skipped proposals by reason,
pair kinds and phases, the centipawn-gap histogram, pairs/s and engine restarts.
"""

from __future__ import annotations

import io
import json
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chessrl.arena.suites import score_cp
from chessrl.engine.client import SearchLimit
from chessrl.lm.formats import get_format
from chessrl.lm.lm_data import split_games
from chessrl.rl.preferences import (
    PREFERENCE_SCHEMA,
    PairRule,
    PrefPosition,
    board_key,
    cap_invalid_share,
    make_pairs,
    mover_cp_after,
    sample_positions,
    unique_positions,
)
from cluster.errors import ConfigError
from cluster.storage import Storage
from pipelines.cli import one_line
from pipelines.common.artifacts import games_table, policy_text_format, read_games
from pipelines.common.config_record import CONFIG_RECORD
from pipelines.common.phase import (
    Inputs,
    Phase,
    PhaseContext,
    PhaseResult,
    gpt2_config,
    model_location,
    readable_model,
)
from pipelines.config import ChessRLConfig, PreferencesConfig

SUMMARY = one_line("preferences")
DESCRIPTION = (
    "Chosen: Stockfish's move at --nodes. Rejected: a proposal --margin-cp or more worse, or no legal\n"
    "move (marked). --judge model: a trained reward model ranks every legal move instead. Shards are\n"
    "written whole; the same command resumes. Examples:\n"
    "  chess-rl preferences --positions 20000 --k 4 --samplers 2\n"
    "  chess-rl preferences --judge model --reward-model runs/a/reward/model"
)

#: Edges of the centipawn-gap histogram in the summary (chosen score - rejected score).
GAP_EDGES: tuple[int, ...] = (50, 100, 200, 400, 800, 1600, 2001)


def games_location(config: ChessRLConfig, inputs: Inputs) -> Storage:
    return Storage.from_uri(config.preferences.games or inputs.folder("prepare").uri_of("games"))


def policy_location(config: ChessRLConfig, inputs: Inputs) -> str:
    """The policy's folder or URI; a missing one is one clear StorageError."""
    return model_location(
        config.preferences.policy,
        inputs.folder("sft").child("model"),
        "preferences.policy (--policy)",
        "sft",
        produced=inputs.will_write("sft"),
    )


def check_preferences(config: ChessRLConfig, inputs: Inputs) -> tuple[str, Storage]:
    """Every input of ``preferences``, before Ray starts: the policy, the games table
    (``game_id`` and ``moves``, at least one game) and, with ``judge: model``, the reward model.
    Returns the first two. A policy is checked readable
    (:func:`chessrl.arena.saved_models.check_saved_model`) unless an earlier phase of the graph
    run writes it."""
    policy = policy_location(config, inputs)
    if config.preferences.policy or not inputs.will_write("sft"):
        readable_model(policy, "preferences.policy (--policy)")
    source = games_location(config, inputs)
    if config.preferences.games or not inputs.will_write("prepare"):
        games_table(source)
    if config.preferences.judge == "model":
        gpt2_config(
            str(config.preferences.reward_model),
            "preferences.reward_model (--reward-model)",
            "GPT2ForSequenceClassification",
            "preferences --judge model needs a reward model (GPT2ForSequenceClassification): train one with "
            "`chess-rl reward`, or rank with Stockfish (--judge stockfish)",
        )
    check_same_judge(config, inputs.folder("preferences"))
    return policy, source


def check_same_judge(config: ChessRLConfig, folder: Storage) -> None:
    """A folder that already holds pairs is resumed only by the judge that ranked them: Stockfish's
    scores are centipawns, a judge's its normalised score x 100, and a reward model's its own, so
    a table with both would mix units (one line, before anything is written)."""
    if not folder.exists(CONFIG_RECORD) or not any(f.endswith(".parquet") for f in folder.list_files()):
        return
    try:
        before = json.loads(folder.read_text(CONFIG_RECORD))
    except ValueError:
        return
    cfg = config.preferences
    asked = {"preferences.judge": cfg.judge}
    if cfg.judge == "model":
        asked["preferences.reward_model"] = cfg.reward_model
    changed = [k for k, v in asked.items() if isinstance(before, dict) and k in before and before[k] != v]
    if changed:
        was = ", ".join(f"{k} {before[k]}" for k in changed)
        now = ", ".join(f"{k} {asked[k]}" for k in changed)
        raise ConfigError(
            f"{folder.uri} holds pairs ranked with {was}; this run asks {now}, and a table of both would mix "
            "their score units. Use a new --run-name (or --set preferences.judge back), or delete the folder"
        )


def plan_positions(
    rows: list[dict[str, Any]], cfg: PreferencesConfig, heldout_fraction: float, seed: int
) -> tuple[list[PrefPosition], list[PrefPosition]]:
    """Training and held-out positions: distinct boards, held-out boards never in training."""
    train_rows, held_rows, _ = split_games(rows, heldout_fraction)
    train = unique_positions(
        sample_positions(train_rows, cfg.positions, seed=seed, source="train", min_ply=cfg.min_ply)
    )
    seen = {board_key(p.fen) for p in train}
    held = unique_positions(
        sample_positions(
            held_rows, cfg.heldout_positions, seed=seed + 1, source="heldout", min_ply=cfg.min_ply
        ),
        exclude=seen,
    )
    return train, held


def shard_pairs(
    positions: list[PrefPosition],
    proposals: list[list[str]],
    pool: Any,
    limit: SearchLimit,
    rule: PairRule,
    random_moves: int = 0,
    seed: int = 0,
) -> tuple[list[dict[str, Any]], Counter[str]]:
    """Stockfish's move for every position, a score for every distinct legal proposal and for
    ``random_moves`` random legal moves the policy did not propose (one batch of
    positions-after-the-move), then the pairs."""
    import random

    import chess

    rng = random.Random(seed)
    # fresh: each search starts from an empty hash, so the chosen move is what Stockfish plays at
    # this limit in that position, whatever it searched before (reproducible, checkable)
    best = pool.analyse([p.fen for p in positions], limit, fresh=True)
    children: list[str] = []
    owners: list[tuple[int, str]] = []
    extras: list[list[str]] = []
    for i, (position, completions) in enumerate(zip(positions, proposals, strict=True)):
        board = chess.Board(position.fen)
        legal = {m.uci() for m in board.legal_moves}
        words = list(dict.fromkeys((c.split() or [""])[0] for c in completions))
        others = sorted(legal - set(words) - {best[i].best_move})
        extra = rng.sample(others, min(random_moves, len(others)))
        extras.append(extra)
        for word in [*words, *extra]:
            if word in legal and word != best[i].best_move:
                after = board.copy(stack=False)
                after.push_uci(word)
                children.append(after.fen())
                owners.append((i, word))
    scored = pool.analyse(children, limit, fresh=True) if children else []
    scores: list[dict[str, int]] = [{} for _ in positions]
    for (i, word), analysis in zip(owners, scored, strict=True):
        scores[i][word] = mover_cp_after(analysis.score)
    rows: list[dict[str, Any]] = []
    skipped: Counter[str] = Counter()
    for i, position in enumerate(positions):
        if best[i].best_move is None:  # the game is over here: nothing to prefer
            skipped["terminal"] += 1
            continue
        got, why = make_pairs(
            position, best[i].best_move, score_cp(best[i].score), proposals[i], scores[i], rule, extras[i]
        )
        rows.extend(got)
        skipped.update(why)
    return rows, skipped


def judge_pairs(
    positions: list[PrefPosition],
    proposals: list[list[str]],
    judge: Any,
    rule: PairRule,
    random_moves: int = 0,
    seed: int = 0,
) -> tuple[list[dict[str, Any]], Counter[str]]:
    """:func:`shard_pairs` with a trained judge in Stockfish's place (``preferences.judge:
    model``): ``judge`` (a :class:`actors.reward_server.RewardClient`) scores every legal move of
    every position in one call; its best move is the chosen one, and each score is written as
    ``round(100 x`` the judge's normalised score``)``, so ``rule.margin_cp`` is the judge margin x 100."""
    import random

    import chess

    from chessrl.rl.reward import RewardQuery

    rng = random.Random(seed)
    legal = [sorted(m.uci() for m in chess.Board(p.fen).legal_moves) for p in positions]
    queries = [
        RewardQuery(p.moves_before, m) for p, moves in zip(positions, legal, strict=True) for m in moves
    ]
    scored = iter(judge.score_batch(queries) if queries else [])
    rows: list[dict[str, Any]] = []
    skipped: Counter[str] = Counter()
    for position, moves, completions in zip(positions, legal, proposals, strict=True):
        raw = {m: float(next(scored)) for m in moves}
        if not moves:  # the game is over here: nothing to prefer
            skipped["terminal"] += 1
            continue
        best = min(moves, key=lambda m: (-raw[m], m))  # the argmax; a tie: the first in UCI order
        scores = {m: round(100 * value) for m, value in raw.items()}
        words = {(c.split() or [""])[0] for c in completions}
        others = sorted(set(moves) - words - {best})
        extra = rng.sample(others, min(random_moves, len(others)))
        got, why = make_pairs(position, best, scores[best], completions, scores, rule, extra)
        rows.extend(got)
        skipped.update(why)
    return rows, skipped


def run_preferences(context: PhaseContext) -> PhaseResult:
    """check -> plan the shards -> start the samplers and the engine pool and make the shards
    not yet written -> summarise every shard (``summary.json``, metrics, the summary lines)."""
    cfg = context.config.preferences
    seed = context.config.run.seed
    policy, source = check_preferences(context.config, Inputs.of_context(context))
    text_format = policy_text_format(policy)  # its proposals are asked in the format it was trained on
    fmt = get_format(text_format)
    rows = read_games(source)
    margin = cfg.margin_cp if cfg.judge == "stockfish" else round(100 * cfg.judge_margin)
    rule = PairRule(margin_cp=margin, ranked=cfg.ranked_pairs)
    train, held = plan_positions(rows, cfg, context.config.sft.heldout_fraction, seed)
    out = context.phase_storage("preferences")
    shards = [
        (f"{name}/shard-{i // cfg.shard_positions:05d}.parquet", positions[i : i + cfg.shard_positions])
        for name, positions in (("train", train), ("heldout", held))
        for i in range(0, len(positions), cfg.shard_positions)
    ]
    done = {f for f in out.list_files() if f.endswith(".parquet")}
    pending = [(name, positions) for name, positions in shards if name not in done]
    context.log(
        f"{len(train):,} training and {len(held):,} held-out positions from {len(rows):,} games at {source.uri}; "
        f"{len(shards)} shards ({len(shards) - len(pending)} already written, {len(pending)} to make); "
        f"policy {policy} (asked in its {text_format} format), k={cfg.k}, "
        + (
            f"Stockfish at {cfg.nodes:,} nodes"
            if cfg.judge == "stockfish"
            else f"judged by {cfg.reward_model}"
        )
    )
    started = time.perf_counter()
    made, totals, restarts = 0, Counter[str](), 0
    if pending:
        numbers = {name: i for i, (name, _) in enumerate(shards)}  # seeds follow the shard, not the run
        made, totals, restarts = make_shards(context, policy, fmt, rule, pending, numbers, out, started)
    seconds = time.perf_counter() - started
    counts, kinds, phases, gaps = shard_stats(out, [name for name, _ in shards])
    summary = {
        "phase": "preferences",
        "games": source.uri,
        "policy": policy,
        "text_format": text_format,
        "positions": {"train": len(train), "heldout": len(held)},
        "pairs": {"train": counts.get("train", 0), "heldout": counts.get("heldout", 0)},
        "made_now": made,
        "shards": len(shards),
        "shards_made_now": len(pending),
        "skipped": dict(totals),
        "kinds": dict(kinds),
        "phases": dict(phases),
        "gap_histogram_cp": gaps,
        "pairs_per_s": made / seconds if made and seconds > 0 else 0.0,
        "seconds": round(seconds, 1),
        "engine_restarts": restarts,
        "k": cfg.k,
        "margin_cp": cfg.margin_cp if cfg.judge == "stockfish" else None,
        "nodes": cfg.nodes if cfg.judge == "stockfish" else None,
        "judge": cfg.judge,
        "reward_model": cfg.reward_model if cfg.judge == "model" else None,
        "judge_margin": cfg.judge_margin if cfg.judge == "model" else None,
    }
    out.write_text("summary.json", json.dumps(summary, indent=2, sort_keys=True))
    context.tracking.log_metrics(
        {
            "pairs_train": summary["pairs"]["train"],
            "pairs_heldout": summary["pairs"]["heldout"],
            "pairs_per_s": summary["pairs_per_s"],
        }
    )
    return PhaseResult(summary=summary, lines=summary_lines(summary, out), ok=True)


def make_shards(
    context: PhaseContext,
    policy: str,
    fmt: Any,
    rule: PairRule,
    pending: list[tuple[str, list[PrefPosition]]],
    numbers: dict[str, int],
    out: Storage,
    started: float,
) -> tuple[int, Counter[str], int]:
    """Start the engine pool and the policy samplers, make every pending shard, stop them.
    Returns the pairs made, the skipped proposals by reason and the engine restarts (pairs/s
    in the log lines count from ``started``)."""
    import ray

    from actors.engine_pool import EnginePool
    from actors.policy_sampler import PolicySampler
    from cluster.capacity import sizing_cpus
    from pipelines.learner import check_gpus

    cfg, run = context.config.preferences, context.config.run.name
    cpus = sizing_cpus()[0]  # the nodes alive, or the first node an autoscaler starts (cluster.capacity)
    if cfg.judge == "model":  # the judge's servers in Stockfish's place: no engine is started
        assert cfg.reward_model is not None  # the config's own check
        from actors.reward_server import RewardClient

        pool: Any = RewardClient.create(
            cfg.reward_model, cfg.judge_servers, run=f"{run}-preferences", threads=1
        )  # a CPU each, one thread: the samplers run beside them
    else:
        engines = cfg.engines or cpus  # half a CPU each: the samplers mostly wait for the engines
        pool = EnginePool.spread(
            engines,
            run=f"{run}-preferences",
            num_cpus_per_engine=0.5,
            key="preferences.engines",
            log=context.log,
        )
    if cfg.sampler_gpus:
        check_gpus(
            "preferences",
            cfg.samplers * cfg.sampler_gpus,
            "preferences.sampler_gpus",
            f"the {cfg.samplers} sampler(s) need {cfg.sampler_gpus:g} GPU each",
            log=context.log,
        )
    samplers = [
        # half a CPU reserved, every core's threads used: it runs while the engines wait for it
        PolicySampler.options(
            name=f"{run}/policy-sampler-{i}", num_cpus=0.5, num_gpus=cfg.sampler_gpus
        ).remote(policy, f"{run}/policy-sampler-{i}", threads=cpus)
        for i in range(cfg.samplers)
    ]
    try:
        maker = ShardMaker(cfg, fmt, rule, context.config.run.seed, samplers, pool, out, context.log)
        made, totals = maker.make(pending, numbers, started)
        restarts = (
            sum(int(s.get("restarts", 0)) for s in ray.get([a.stats.remote() for a in pool.actors]))
            if cfg.judge == "stockfish"
            else 0
        )
    finally:
        pool.shutdown()
        for sampler in samplers:
            ray.kill(sampler, no_restart=True)
    return made, totals, restarts


@dataclass
class ShardMaker:
    """Makes shards of pairs: the samplers propose ``k`` moves a position, one shard ahead of
    the engine pool, which scores the proposals of the shard before (:func:`shard_pairs`)."""

    cfg: PreferencesConfig
    fmt: Any
    rule: PairRule
    seed: int
    samplers: list[Any]
    pool: Any
    out: Storage
    log: Callable[[str], None]

    def ask(self, positions: list[PrefPosition], index: int) -> list[Any]:
        """The samplers' calls for one shard's positions (``batch_positions`` a call)."""
        cfg = self.cfg
        chunks = [
            positions[i : i + cfg.batch_positions] for i in range(0, len(positions), cfg.batch_positions)
        ]
        return [
            self.samplers[j % len(self.samplers)].propose.remote(
                [p.asked(self.fmt) for p in chunk],
                cfg.k,
                cfg.temperature,
                self.seed * 1_000_003 + index * 1009 + j,
            )
            for j, chunk in enumerate(chunks)
        ]

    def make(
        self, pending: list[tuple[str, list[PrefPosition]]], numbers: dict[str, int], started: float
    ) -> tuple[int, Counter[str]]:
        """Every pending shard, written whole; returns the pairs made and the skipped proposals."""
        import ray

        cfg, seed = self.cfg, self.seed
        limit = SearchLimit(nodes=cfg.nodes)
        made, totals = 0, Counter[str]()
        asked = self.ask(pending[0][1], numbers[pending[0][0]])
        for done_now, (name, positions) in enumerate(pending):
            index = numbers[name]
            proposals = [c for chunk in ray.get(asked) for c in chunk]
            if done_now + 1 < len(pending):  # the next shard's proposals, while the engines score this one
                asked = self.ask(pending[done_now + 1][1], numbers[pending[done_now + 1][0]])
            if cfg.judge == "model":
                shard_rows, skipped = judge_pairs(
                    positions, proposals, self.pool, self.rule, cfg.random_moves, seed * 7919 + index
                )
            else:
                shard_rows, skipped = shard_pairs(
                    positions, proposals, self.pool, limit, self.rule, cfg.random_moves, seed * 7919 + index
                )
            shard_rows, dropped = cap_invalid_share(shard_rows, cfg.max_invalid_share, seed + index)
            skipped["invalid_share_cap"] += dropped
            self.out.write_bytes(name, parquet_bytes(shard_rows))
            made += len(shard_rows)
            totals.update(skipped)
            self.log(
                f"{name}: {len(shard_rows)} pairs from {len(positions)} positions "
                f"({done_now + 1}/{len(pending)} shards, {made / (time.perf_counter() - started):.1f} pairs/s)"
            )
        return made, totals


def parquet_bytes(rows: list[dict[str, Any]]) -> bytes:
    """A shard's pairs as Parquet (:data:`PREFERENCE_SCHEMA`, zstd)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows, schema=PREFERENCE_SCHEMA), buffer, compression="zstd")
    return buffer.getvalue()


def shard_stats(
    out: Storage, names: list[str]
) -> tuple[dict[str, int], Counter[str], Counter[str], dict[str, int]]:
    """Over every shard: pairs by split, by kind and by game phase, and the histogram of
    centipawn gaps (chosen score - rejected score) on :data:`GAP_EDGES`."""
    import pyarrow.parquet as pq

    counts: dict[str, int] = {}
    kinds: Counter[str] = Counter()
    phases: Counter[str] = Counter()
    gaps = [0] * len(GAP_EDGES)
    for name in names:
        table = pq.read_table(io.BytesIO(out.read_bytes(name)))
        counts[name.split("/")[0]] = counts.get(name.split("/")[0], 0) + table.num_rows
        kinds.update(table.column("kind").to_pylist())
        phases.update(table.column("phase").to_pylist())
        chosen, rejected = (
            table.column("chosen_score").to_pylist(),
            table.column("rejected_score").to_pylist(),
        )
        for gap in (c - r for c, r in zip(chosen, rejected, strict=True)):
            gaps[next((i for i, edge in enumerate(GAP_EDGES) if gap < edge), len(GAP_EDGES) - 1)] += 1
    histogram = {
        f"<{edge}" if edge < GAP_EDGES[-1] else f">={GAP_EDGES[-2]}": n
        for edge, n in zip(GAP_EDGES, gaps, strict=True)
    }
    return counts, kinds, phases, histogram


def summary_lines(summary: dict[str, Any], out: Storage) -> list[str]:
    pairs, positions = summary["pairs"], summary["positions"]
    skipped = ", ".join(f"{k} {v}" for k, v in sorted(summary["skipped"].items())) or "none"
    return [
        "preferences summary",
        f"  positions     {positions['train']:,} training, {positions['heldout']:,} held out (k={summary['k']} proposals each)",
        f"  pairs         {pairs['train']:,} training, {pairs['heldout']:,} held out; kinds "
        + ", ".join(f"{k} {v}" for k, v in sorted(summary["kinds"].items())),
        "  phases        " + ", ".join(f"{k} {v}" for k, v in sorted(summary["phases"].items())),
        f"  skipped       {skipped} (proposals)",
        ("  cp gap        " if summary.get("judge", "stockfish") == "stockfish" else "  judge gap     ")
        + ", ".join(f"{k}: {v}" for k, v in summary["gap_histogram_cp"].items()),
        f"  speed         {summary['made_now']:,} pairs made now in {summary['seconds']} s "
        f"({summary['pairs_per_s']:.1f} pairs/s); {summary['engine_restarts']} engine restarts",
        f"  output        {out.uri}",
    ]


PHASE = Phase(
    name="preferences",
    section="preferences",
    section_model=PreferencesConfig,
    run=run_preferences,
    check=check_preferences,
    folder="preferences",
    summary=SUMMARY,
    description=DESCRIPTION,
)
main = PHASE.main
if __name__ == "__main__":
    sys.exit(main())
