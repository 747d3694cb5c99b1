"""``evaluate``: an arena of players (one Ray task per game), Elo on a calibrated ladder, SPRT
A/B matches, EPD suites, move quality, a PGN of every game and a markdown report with plots.

    python -m pipelines.evaluate --config tiny
    chess-rl evaluate --players sft random stockfish:skill=0 stockfish:elo=1350 --games 40
    chess-rl evaluate --players lm:runs/a/sft/model lm:runs/b/sft/model --mode round_robin --games 100
    chess-rl evaluate --mode sprt --players lm:runs/ppo/model lm:runs/sft/model --elo0 0 --elo1 20 --games 2000

The first player is the candidate. ``gauntlet`` plays it against each other player;
``round_robin`` plays every pair. Each opening (plies 6-12 of a held-out game of the run's games
table or ``--positions-from``, seeded random plies, or a book: :func:`arena_openings`) is played
from both sides. With ``--ladder`` (the default) the candidate is also rated on the low Elo ladder
(:mod:`chessrl.arena.ladder`): rungs below Stockfish's weakest ``UCI_Elo``, rated once per storage and
Stockfish build under ``<storage>/ladder/<key>/`` and reused, then a placement match and more
games against the informative rungs, so even a weak model gets a finite Elo with an interval.

``sprt`` plays two players in game pairs (one opening, colours swapped) and stops when the
pentanomial SPRT accepts H0 (``--elo0``) or H1 (``--elo1``), or after ``--games`` games.

``paired`` plays no games: the first player is a start, each other player a run from it (the
same learner from several seeds, say); each one's legal-masked moves on ``--positions`` held-out
positions are scored by Stockfish against the start's on the same positions, and the runs' mean
gain gets an interval that counts their spread (:func:`chessrl.arena.move_quality.paired_over_runs`)::

    chess-rl evaluate --mode paired --players lm:runs/a/sft/model lm:runs/s1/ppo/model lm:runs/s2/ppo/model

Every finished game is written at once to ``<storage>/<run>/evaluate/<name>/games/<key>.json``
(ladder games beside it), so running the same command again after a kill plays only the missing
games. Then: ``games.pgn``, ``results.json``, ``report.md`` and the plots (``score.png`` and
``elo.png``; ``llr.png`` for an SPRT) in the same folder, all logged to MLflow.
"""

from __future__ import annotations

import json
import math
import re
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from chessrl.arena.eval_report import (
    fmt_estimate,
    other_pairings,
    paired_markdown,
    paired_summary_lines,
    plot,
    report_markdown,
    sprt_markdown,
    sprt_plot,
    sprt_summary_lines,
    summary_lines,
)
from chessrl.arena.game import ArenaGame, Opening, game_pgn
from chessrl.arena.ladder import LadderSettings, ladder_record, stockfish_build
from chessrl.arena.players import PlayerSpec, parse_player_spec
from chessrl.arena.rating import match_elo, pentanomial_elo, rate_players
from chessrl.arena.sprt import pair_counts, pentanomial_llr, sprt_pentanomial
from chessrl.arena.suites import move_quality, score_cp
from chessrl.engine.client import SearchLimit, find_stockfish
from cluster.errors import ConfigError, InputDataError, UserError
from cluster.storage import Storage
from pipelines.cli import one_line
from pipelines.common.phase import Inputs, Phase, PhaseContext, PhaseResult
from pipelines.config import EvaluateConfig
from pipelines.evaluate_matches import (
    POOL_CPUS_PER_ENGINE,
    Arena,
    GameTask,
    Settings,
    ensure_ladder,
    place_on_ladder,
    schedule_pairs,
    sized_arena,
    sprt_tasks,
    suite_task,
)
from pipelines.evaluate_openings import (
    EvaluateInputs,
    arena_openings,
    check_evaluate,
    ladder_settings,
    player_pairs,
    trained_against,
)

SUMMARY = one_line("evaluate")
DESCRIPTION = (
    "Players: random, sft, lm:DIR, mcts[:FILE.pt][,sims=N][,search=gumbel],\n"
    "stockfish[:skill=N|elo=N][,nodes=N][,random=P], uci:PATH. The first is the candidate, rated on\n"
    "the low Elo ladder (--no-ladder: off). Results are written as games finish; the same command\n"
    "resumes. Examples:\n"
    "  chess-rl evaluate --players sft random stockfish:skill=0 stockfish:elo=1350 --games 20\n"
    "  chess-rl evaluate --mode sprt --players lm:runs/a/ppo/model lm:runs/a/sft/model --games 400 --seed 1\n"
    "  chess-rl evaluate --mode sprt --players mcts,sims=16,search=gumbel mcts,sims=32 --games 200\n"
    "  chess-rl evaluate --mode paired --players lm:runs/a/sft/model lm:runs/s1/ppo/model lm:runs/s2/ppo/model"
)


# ---------------------------------------------------------------------------------------------
# the driver


def schedule(
    cfg: EvaluateConfig, specs: list[PlayerSpec], openings: list[Opening], seed: int
) -> list[GameTask]:
    """Every game of a gauntlet (the first player against each other), a round robin (every pair)
    or the config's own ``pairs``."""
    n = len(specs)
    pairs = (
        player_pairs(cfg, n)
        if cfg.pairs
        else [(0, j) for j in range(1, n)]
        if cfg.mode == "gauntlet"
        else [(i, j) for i in range(n) for j in range(i + 1, n)]
    )
    return schedule_pairs([(specs[i], specs[j]) for i, j in pairs], cfg.games, openings, seed)


def run_evaluate(context: PhaseContext) -> PhaseResult:
    """check -> start the engine pool -> play (the arena, the ladder, the suites, move quality,
    or an SPRT match) or score (paired) -> summarise (results, report, PGN, metrics)."""

    cfg = context.config.evaluate
    found = check_evaluate(context.config, Inputs.of_context(context))
    specs, seed = found.specs, context.config.run.seed
    ls = ladder_settings(cfg, seed)
    rung_specs = [parse_player_spec(r) for r in ls.rungs] if ls else []
    out = context.phase_storage("evaluate").child(cfg.name)
    openings: list[Opening] = []
    record: dict[str, Any] = {}  # results.json's openings and training opponents
    if cfg.mode != "paired":
        openings, opened = arena_openings(context.config, found, context.log)
        trained = trained_against(specs, found.sft_model, cfg.mode == "sprt", context.log)
        record = {"openings": opened, **trained}
    settings = Settings(
        found.sft_model,
        found.selfplay_best,
        cfg.lm_temperature,
        cfg.lm_retries,
        cfg.on_illegal,
        cfg.stockfish_nodes,
        cfg.max_plies,
        cfg.resign_cp,
        cfg.resign_plies,
        cfg.adjudicate_cp,
    )
    engine_players = [s for s in (*specs, *rung_specs) if s.kind == "stockfish"]
    pool = start_pool(context, bool(engine_players))
    try:
        if cfg.mode == "paired":
            return run_paired(context, found, pool, out)
        if pool is not None:
            check_engine_players(pool, engine_players, specs)
        arena = sized_arena(settings, pool, cfg.max_parallel, context.log)
        if cfg.mode == "sprt":
            return run_sprt(arena, cfg, specs, openings, out, seed, context, record)
        played = play_arena(arena, found, openings, out, ls, pool, context)
    finally:
        if pool is not None:
            pool.shutdown()
    games, suite_results, quality, ladder_games, ladder_info = played
    results = {**summarize(specs, games, suite_results, quality, ladder_games, ladder_info), **record}
    write_outputs(out, cfg, [*games, *ladder_games], results, context)
    lines = summary_lines(results, out.uri_of("report.md"), out.uri_of("games.pgn"))
    return PhaseResult(summary=results, lines=lines, ok=True)


def start_pool(context: PhaseContext, engine_players: bool) -> Any:
    """The engine pool, where Stockfish plays (``engine_players``), resigns or adjudicates games,
    or scores the candidate's moves; else None."""
    cfg = context.config.evaluate
    if not (
        engine_players
        or cfg.resign_cp is not None
        or cfg.adjudicate_cp is not None
        or (cfg.quality_nodes > 0 and cfg.mode != "sprt")
    ):
        return None
    from actors.engine_pool import EnginePool

    return EnginePool.spread(
        cfg.engines,
        run=f"{context.config.run.name}-evaluate",
        num_cpus_per_engine=POOL_CPUS_PER_ENGINE,
        key="evaluate.engines",
        log=context.log,
    )


def check_engine_players(pool: Any, engine_players: list[PlayerSpec], specs: list[PlayerSpec]) -> None:
    """Each Stockfish player's strength, tried on one position before any game."""
    for s in engine_players:
        try:
            pool.play("8/8/8/8/8/8/6k1/4K2R w K - 0 1", SearchLimit(nodes=1), strength=s.strength())
        except UserError as exc:
            key = "evaluate.players" if s in specs else "evaluate.ladder_rungs"
            raise ConfigError(f"{key}: player {s.label!r}: {exc}") from None


def play_arena(
    arena: Arena,
    found: EvaluateInputs,
    openings: list[Opening],
    out: Storage,
    ls: LadderSettings | None,
    pool: Any,
    context: PhaseContext,
) -> tuple[
    list[ArenaGame], list[dict[str, Any]], dict[str, float] | None, list[ArenaGame], dict[str, Any] | None
]:
    """The gauntlet or round robin, then the ladder, the suites and the candidate's move quality:
    ``(games, suite results, quality, ladder games, ladder record)``."""
    import ray

    cfg, specs, seed = context.config.evaluate, found.specs, context.config.run.seed
    tasks = schedule(cfg, specs, openings, seed)
    context.log(f"{cfg.mode} of {', '.join(s.label for s in specs)}; {len(openings)} openings")
    played = arena.play(tasks, out.child("games"), "games")
    games = [played[t.key] for t in tasks]
    ladder_info: dict[str, Any] | None = None
    ladder_games: list[ArenaGame] = []
    if ls is not None:
        build = stockfish_build(find_stockfish())
        ladder, calibration_played = ensure_ladder(
            arena, ls, Storage.from_uri(context.config.run.storage), build
        )
        earlier = [g for g in games if {g.white, g.black} - {specs[0].label} <= ladder.ratings.keys()]
        ladder_games, info = place_on_ladder(arena, cfg, specs[0], ls, ladder, earlier, out, seed)
        ladder_info = {
            **ladder_record(ladder),
            **info,
            "calibration_played": calibration_played,
            "candidate_games": len(ladder_games) + len(earlier),
        }
    suite_results: list[dict[str, Any]] = []
    if found.suites:
        remote_suites = ray.remote(num_cpus=1)(suite_task)
        suite_results = ray.get(
            remote_suites.remote(specs[0], arena.settings, found.suites, arena.actors, arena.engines)
        )
    quality = (
        candidate_quality(pool, specs[0].label, games, cfg.quality_nodes)
        if pool and cfg.quality_nodes
        else None
    )
    return games, suite_results, quality, ladder_games, ladder_info


def sprt_state(
    cfg: EvaluateConfig, specs: list[PlayerSpec], tasks: list[GameTask], games: dict[str, ArenaGame]
) -> dict[str, Any]:
    """The SPRT over the finished pairs (both games played), in pair order: counts, LLR after
    each pair, the decision, the Elo difference."""
    a = specs[0].label
    pair_scores: list[float] = []
    trajectory: list[float] = []
    wdl = Counter[str]()
    for first, second in zip(tasks[::2], tasks[1::2], strict=True):
        if first.key not in games or second.key not in games:
            continue
        scores = [games[first.key].score_for(a), games[second.key].score_for(a)]
        wdl.update("wins" if x == 1 else "draws" if x == 0.5 else "losses" for x in scores)
        pair_scores.append(sum(scores))
        trajectory.append(pentanomial_llr(pair_counts(pair_scores), cfg.elo0, cfg.elo1))
    counts = pair_counts(pair_scores)
    result = sprt_pentanomial(counts, cfg.elo0, cfg.elo1, cfg.alpha, cfg.beta)
    n = len(pair_scores)
    est = pentanomial_elo(counts) if n else None
    return {
        "elo0": cfg.elo0,
        "elo1": cfg.elo1,
        "alpha": cfg.alpha,
        "beta": cfg.beta,
        "max_games": len(tasks),
        "pairs": n,
        "games": 2 * n,
        "pentanomial": list(counts),
        "llr": result.llr,
        "lower": result.lower,
        "upper": result.upper,
        "decision": result.decision,
        "trajectory": trajectory,
        "wins": wdl["wins"],
        "draws": wdl["draws"],
        "losses": wdl["losses"],
        "score": est.score if est else 0.5,
        "elo": est.elo if est else 0.0,
        "elo_low": est.low if est else -math.inf,
        "elo_high": est.high if est else math.inf,
    }


def run_sprt(
    arena: Arena,
    cfg: EvaluateConfig,
    specs: list[PlayerSpec],
    openings: list[Opening],
    out: Storage,
    seed: int,
    context: PhaseContext,
    record: dict[str, Any] | None = None,
) -> PhaseResult:
    """Game pairs until the SPRT accepts H0 or H1, or ``cfg.games`` games; resumable. ``record``
    (the openings, the players' training opponents) goes into results.json and the report."""
    tasks = sprt_tasks(specs, openings, cfg.games, seed)
    reported = [0]

    def decided(finished: dict[str, ArenaGame]) -> bool:
        state = sprt_state(cfg, specs, tasks, finished)
        if state["pairs"] > reported[0]:
            reported[0] = state["pairs"]
            if state["decision"] != "continue" or state["pairs"] % 5 == 0:
                arena.log(
                    f"sprt: {state['pairs']} pairs, LLR {state['llr']:.2f} ({state['lower']:.2f} .. {state['upper']:.2f})"
                )
        return state["decision"] != "continue"

    arena.log(
        f"sprt: {specs[0].label} against {specs[1].label}, H0 {cfg.elo0:+g} / H1 {cfg.elo1:+g}, "
        f"alpha {cfg.alpha:g}, beta {cfg.beta:g}, at most {len(tasks)} games"
    )
    finished = arena.play(tasks, out.child("games"), "sprt games", stop=decided)
    state = sprt_state(cfg, specs, tasks, finished)
    games = [finished[t.key] for t in tasks if t.key in finished]
    results = {
        "mode": "sprt",
        "players": [s.label for s in specs],
        "sprt": state,
        "games": len(games),
        "results": dict(Counter(g.result for g in games)),
        **(record or {}),
    }
    publish(out, games, f"chess-rl sprt {cfg.name}", results, sprt_markdown(results), sprt_plot, context)
    metrics = {"sprt_llr": state["llr"], "sprt_pairs": float(state["pairs"]), "sprt_score": state["score"]}
    if math.isfinite(state["elo"]):
        metrics["sprt_elo"] = state["elo"]
    context.tracking.log_metrics(metrics)
    return PhaseResult(summary=results, lines=sprt_summary_lines(results, out.uri_of("report.md")), ok=True)


def run_paired(context: PhaseContext, found: EvaluateInputs, pool: Any, out: Storage) -> PhaseResult:
    """``--mode paired``: every player's legal-masked argmax (a judge's best-scored move) on the same held-out positions, scored
    by the engine pool; each later player's paired gain over the first, and their mean over runs."""
    from chessrl.arena.move_quality import PER_GAME, heldout_positions, runs_move_quality
    from chessrl.arena.saved_models import load_saved_model
    from chessrl.lm.lm_data import split_games
    from pipelines.common.artifacts import fit_games, policy_text_format, read_games
    from pipelines.learner.quality import as_chooser

    cfg, config = context.config.evaluate, context.config
    specs = found.specs
    paths = [str(found.sft_model if s.kind == "sft" else s.path) for s in specs]
    formats = [policy_text_format(p) for p in paths]
    source = found.positions_from
    assert source is not None  # check_evaluate found it for paired mode
    _, held, _ = split_games(read_games(source), config.sft.heldout_fraction)
    if not held:
        raise InputDataError(
            f"evaluate --mode paired: {source.uri} has no held-out games (sft.heldout_fraction "
            f"{config.sft.heldout_fraction:g} of its games): give --positions-from a larger table"
        )
    for text_format, path in zip(formats, paths, strict=True):
        held = fit_games(held, text_format, path)  # each game cut to the shortest context
    positions = heldout_positions(held, cfg.positions, config.run.seed + 1)
    context.log(
        f"paired: {len(positions)} held-out positions of {len({p.game for p in positions})} games of {source.uri} "
        f"(at most {PER_GAME} a game), {len(specs)} players"
    )
    # a judge: its best-scored move, read in its own format (the paired measure's MoveChooser)
    loaded = [
        (*as_chooser(*load_saved_model(p, "reward")), f)
        if s.kind == "judge"
        else (*load_saved_model(p, "policy"), f)
        for s, p, f in zip(specs, paths, formats, strict=True)
    ]
    limit = SearchLimit(nodes=cfg.quality_nodes)

    def expected(fens: list[str]) -> list[float]:
        return [a.score.expected for a in pool.analyse(fens, limit, fresh=True)]  # order-free, reproducible

    runs = {s.label: m for s, m in zip(specs[1:], loaded[1:], strict=True)}
    quality = runs_move_quality(loaded[0], runs, positions, expected)
    results = {
        "mode": "paired",
        "players": [s.label for s in specs],
        "start": specs[0].label,
        "nodes": cfg.quality_nodes,
        "positions_from": source.uri,
        "seed": config.run.seed + 1,
        "per_game": PER_GAME,
        **quality,
    }
    out.write_text("results.json", json.dumps(json_safe(results), indent=2, sort_keys=True))
    out.write_text("report.md", paired_markdown(results))
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("results.json", "report.md"):
            local = Path(tmp) / name
            local.write_bytes(out.read_bytes(name))
            context.tracking.log_artifact(local)
    metrics = {f"paired_gain_{i}": q["gain"] for i, q in enumerate(quality["runs"].values(), start=1)}
    if quality["over_runs"]:
        over = quality["over_runs"]
        metrics.update(
            paired_gain_mean=over["gain"], paired_gain_low=over["low"], paired_gain_high=over["high"]
        )
    context.tracking.log_metrics(metrics)
    return PhaseResult(summary=results, lines=paired_summary_lines(results, out.uri_of("report.md")), ok=True)


def candidate_quality(pool: Any, name: str, games: list[ArenaGame], nodes: int) -> dict[str, float]:
    """ACPL and Lichess-style accuracy of the candidate's moves in the games (pool searches)."""
    import chess

    positions: list[tuple[str, str]] = []
    for game in games:
        board = chess.Board(game.opening.fen) if game.opening.fen else chess.Board()
        for uci in game.opening.moves:
            board.push_uci(uci)
        for uci in game.moves:
            if (board.turn == chess.WHITE) == (game.white == name):
                positions.append((board.fen(), uci))
            board.push_uci(uci)
    if not positions:
        return {"moves": 0, "acpl": 0.0, "accuracy": 0.0}
    limit = SearchLimit(nodes=nodes)

    best = pool.analyse([fen for fen, _ in positions], limit)
    pairs = []
    for (fen, uci), analysis in zip(positions, best, strict=True):
        played = analysis.score if analysis.best_move == uci else pool.score_moves(fen, [uci], limit)[0]
        best_cp = score_cp(analysis.score)
        pairs.append((best_cp, min(score_cp(played), best_cp)))
    q = move_quality(pairs)
    return {"moves": q.moves, "acpl": q.acpl, "accuracy": q.accuracy, "nodes": nodes}


def summarize(
    specs: list[PlayerSpec],
    games: list[ArenaGame],
    suites: list[dict[str, Any]],
    quality: dict[str, float] | None,
    ladder_games: Sequence[ArenaGame] = (),
    ladder: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Scores per opponent (the arena's own games), one Elo fit over every game with the
    anchored players and the ladder's rungs fixed, and the candidate's move statistics."""
    candidate = specs[0].label
    pairings: dict[str, dict[str, Any]] = {}
    for game in games:
        if candidate not in (game.white, game.black):
            continue
        opponent = game.black if game.white == candidate else game.white
        p = pairings.setdefault(opponent, {"wins": 0, "draws": 0, "losses": 0, "terminations": Counter()})
        s = game.score_for(candidate)
        p["wins" if s == 1 else "draws" if s == 0.5 else "losses"] += 1
        p["terminations"][game.termination] += 1
    for p in pairings.values():
        est = match_elo(p["wins"], p["draws"], p["losses"])
        p.update(score=est.score, elo_diff=est.elo, elo_low=est.low, elo_high=est.high, games=est.games)
        p["terminations"] = dict(p["terminations"])
    everything = [*games, *ladder_games]
    anchors: dict[str, float] = {s.label: s.anchor_elo for s in specs if s.anchor_elo is not None}
    if ladder:
        met = {x for g in everything for x in (g.white, g.black)}
        anchors.update({label: v[0] for label, v in ladder["ratings"].items() if label in met})
    ratings: dict[str, Any] = {}
    if anchors:
        try:
            fitted = rate_players([(g.white, g.black, g.score_for(g.white)) for g in everything], anchors)
            ratings = {
                k: {f: getattr(v, f) for f in ("elo", "low", "high", "games", "score", "anchored")}
                for k, v in fitted.items()
            }
        except ValueError as exc:
            ratings = {"error": str(exc)}
    legal = {"moves": 0, "first_attempt_legal": 0, "illegal_attempts": 0, "fallbacks": 0}
    for game in everything:
        for color in ("white", "black"):
            if getattr(game, color) == candidate:
                legal["moves"] += game.player_moves[color]
                legal["first_attempt_legal"] += game.first_attempt_legal[color]
                legal["illegal_attempts"] += game.illegal_attempts[color]
                legal["fallbacks"] += game.fallbacks[color]
    legal["legal_rate"] = legal["first_attempt_legal"] / legal["moves"] if legal["moves"] else 0.0
    return {
        "candidate": candidate,
        "players": [s.label for s in specs],
        "games": len(games),
        "ladder_games": len(ladder_games),
        "pairings": pairings,
        "other_pairings": other_pairings([s.label for s in specs], games),
        "ratings": ratings,
        "anchors": anchors,
        "ladder": ladder,
        "candidate_moves": legal,
        "suites": suites,
        "quality": quality,
        "results": dict(Counter(g.result for g in games)),
    }


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float as None: results.json is plain JSON (no NaN/Infinity);
    the report's text says what an open end means."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def publish(
    out: Storage,
    games: Sequence[ArenaGame],
    event: str,
    results: dict[str, Any],
    report: str,
    plots: Callable[[dict[str, Any], Path], list[Path]],
    context: PhaseContext,
) -> None:
    """``games.pgn``, ``results.json`` (plain JSON: no NaN/Infinity), ``report.md`` and the plots,
    to storage and to the phase's MLflow run."""
    out.write_text(
        "games.pgn", "".join(game_pgn(g, event=event, round_=str(i + 1)) for i, g in enumerate(games))
    )
    out.write_text("results.json", json.dumps(json_safe(results), indent=2, sort_keys=True, default=str))
    out.write_text("report.md", report)
    with tempfile.TemporaryDirectory() as tmp:
        for path in plots(results, Path(tmp)):
            out.upload_file(path, path.name)
            context.tracking.log_artifact(path)
        for name in ("games.pgn", "results.json", "report.md"):
            local = Path(tmp) / name
            local.write_bytes(out.read_bytes(name))
            context.tracking.log_artifact(local)


def write_outputs(
    out: Storage, cfg: EvaluateConfig, games: list[ArenaGame], results: dict[str, Any], context: PhaseContext
) -> None:
    c = results["candidate"]
    readable = dict(results)
    if c in results["ratings"]:
        r = results["ratings"][c]
        readable["candidate_elo"] = fmt_estimate(r["elo"], r["low"], r["high"], signed=False)
    openings = results.get("openings") or cfg.openings or f"{cfg.random_plies} seeded random plies"
    report = report_markdown(results, cfg.mode, cfg.max_plies, openings)
    publish(
        out,
        games,
        f"chess-rl evaluate {cfg.name}",
        readable,
        report,
        lambda _, folder: plot(results, folder),
        context,
    )
    metrics: dict[str, float] = {}
    for opp, p in results["pairings"].items():
        key = re.sub(r"[^A-Za-z0-9_]+", "_", opp)
        metrics[f"score_vs_{key}"] = p["score"]
    if c in results["ratings"]:
        for name in ("elo", "low", "high"):
            if math.isfinite(results["ratings"][c][name]):
                metrics["elo" if name == "elo" else f"elo_{name}"] = results["ratings"][c][name]
    metrics["legal_rate"] = results["candidate_moves"]["legal_rate"]
    for s in results["suites"]:
        metrics[f"suite_{s['name']}_accuracy"] = s["accuracy"]
    if results["quality"]:
        metrics["acpl"], metrics["accuracy"] = results["quality"]["acpl"], results["quality"]["accuracy"]
    context.tracking.log_metrics(metrics)


PHASE = Phase(
    name="evaluate",
    section="evaluate",
    section_model=EvaluateConfig,
    run=run_evaluate,
    check=check_evaluate,
    summary=SUMMARY,
    description=DESCRIPTION,
)
main = PHASE.main
if __name__ == "__main__":
    sys.exit(main())
