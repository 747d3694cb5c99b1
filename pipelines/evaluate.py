"""``evaluate``: an arena of players (one Ray task per game), Elo against the Stockfish levels
played, EPD suites, move quality, a PGN of every game and a markdown report with plots.

    python -m pipelines.evaluate --config tiny
    chess-rl evaluate --players sft random stockfish:skill=0 stockfish:elo=1350 --games 40
    chess-rl evaluate --players lm:runs/a/sft/model lm:runs/b/sft/model --mode round_robin --games 100

The first player is the candidate. ``gauntlet`` plays it against each other player;
``round_robin`` plays every pair. Each opening (seeded random plies, or a book) is played from
both sides. Every finished game is written at once to
``<storage>/<run>/evaluate/<name>/games/<key>.json``, so running the same command again after a
kill plays only the missing games. Then: ``games.pgn``, ``results.json``, ``report.md``,
``score.png`` and ``elo.png`` in the same folder, all logged to MLflow.
"""

from __future__ import annotations

import json
import math
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chessrl.arena import ArenaGame, Opening, book_openings, game_pgn, play_game, random_openings
from chessrl.engine import SearchLimit
from chessrl.players import (
    LMPlayer,
    MCTSPlayer,
    Player,
    PlayerSpec,
    RandomPlayer,
    StockfishPlayer,
    UCIPlayer,
    parse_player_spec,
)
from chessrl.rating import match_elo, rate_players
from chessrl.suites import move_quality, read_epd_suite, run_suite, score_cp
from cluster.errors import ConfigError, StorageError, UserError
from cluster.storage import Storage
from pipelines.config import EvaluateConfig
from pipelines.phase import Phase, PhaseContext, PhaseResult, run_phase

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class GameTask:
    """One game to play: who, from where, with which seed; ``key`` names its result file."""

    key: str
    white: PlayerSpec
    black: PlayerSpec
    opening: Opening
    seed: int


@dataclass(frozen=True)
class Settings:
    """What a game task needs besides its players (picklable, sent to every task)."""

    sft_model: str | None
    selfplay_best: str | None
    lm_temperature: float
    lm_retries: int
    on_illegal: str
    stockfish_nodes: int
    max_plies: int
    resign_cp: int | None
    resign_plies: int


_MODELS: dict[str, tuple[Any, Any]] = {}  # per worker process: Ray reuses workers across tasks


def build_player(spec: PlayerSpec, settings: Settings, pool: Any) -> Player:
    """The player a spec names (language models are loaded once per worker process)."""
    if spec.kind == "random":
        return RandomPlayer(spec.label)
    if spec.kind in ("sft", "lm"):
        from chessrl.models import load_pretrained

        path = settings.sft_model if spec.kind == "sft" else spec.path
        assert path is not None
        if path not in _MODELS:
            _MODELS[path] = load_pretrained(path)
        model, tokenizer = _MODELS[path]
        return LMPlayer(
            model, tokenizer, name=spec.label, temperature=settings.lm_temperature, retries=settings.lm_retries,
            on_illegal=settings.on_illegal,  # type: ignore[arg-type]
        )  # fmt: skip
    if spec.kind == "mcts":
        from chessrl.network import load_network

        path = spec.path or settings.selfplay_best
        assert path is not None
        if path not in _MODELS:
            _MODELS[path] = (load_network(path), None)
        return MCTSPlayer(_MODELS[path][0], spec.simulations or 32, name=spec.label)
    limit = spec.search_limit(settings.stockfish_nodes)
    if spec.kind == "stockfish":
        return StockfishPlayer(pool, spec.strength(), limit, name=spec.label, random_share=(spec.random_share or 0) / 100)
    assert spec.path is not None
    return UCIPlayer(spec.path, limit, name=spec.label)


def _pool(actors: list[Any] | None, engines: int) -> Any:
    if not actors:
        return None
    from actors.engine_pool import EnginePool

    return EnginePool(actors, engines)


def play_one(
    task: GameTask, settings: Settings, pool_actors: list[Any] | None, engines: int
) -> dict[str, Any]:
    """A Ray task: play one game and return it as a dict."""
    pool = _pool(pool_actors, engines)
    white = build_player(task.white, settings, pool)
    black = build_player(task.black, settings, pool)
    evaluator = None
    if settings.resign_cp is not None and pool is not None:

        def evaluator(fen: str) -> int | None:
            [analysis] = pool.analyse([fen], SearchLimit(nodes=2000))
            return score_cp(analysis.score)

    try:
        game = play_game(
            white, black, opening=task.opening, max_plies=settings.max_plies, seed=task.seed,
            evaluator=evaluator, resign_cp=settings.resign_cp, resign_plies=settings.resign_plies,
        )  # fmt: skip
    finally:
        white.close()
        black.close()
    return {"key": task.key, **game.to_dict()}


def suite_task(
    spec: PlayerSpec, settings: Settings, suites: list[str], pool_actors: list[Any] | None, engines: int
) -> list[dict[str, Any]]:
    """A Ray task: the candidate on every EPD suite."""
    player = build_player(spec, settings, _pool(pool_actors, engines))
    try:
        out = []
        for path in suites:
            result = run_suite(player, Path(path).stem, read_epd_suite(path))
            out.append({**result.__dict__, "accuracy": result.accuracy})
        return out
    finally:
        player.close()


# ---------------------------------------------------------------------------------------------
# the driver


def schedule(
    cfg: EvaluateConfig, specs: list[PlayerSpec], openings: list[Opening], seed: int
) -> list[GameTask]:
    """Every game of the evaluation, in a stable order with stable keys."""
    n = len(specs)
    pairs = (
        [(0, j) for j in range(1, n)]
        if cfg.mode == "gauntlet"
        else [(i, j) for i in range(n) for j in range(i + 1, n)]
    )
    tasks = []
    for p, (i, j) in enumerate(pairs):
        a, b = specs[i], specs[j]
        for g in range(cfg.games):
            white, black = (a, b) if g % 2 == 0 else (b, a)
            slug = re.sub(r"[^A-Za-z0-9=.-]+", "_", f"{a.label}-vs-{b.label}")[:80]
            tasks.append(
                GameTask(
                    f"{p:02d}-{slug}-{g:04d}",
                    white,
                    black,
                    openings[(g // 2) % len(openings)],
                    seed * 100_003 + p * 10_007 + g,
                )
            )
    return tasks


def validate(cfg: EvaluateConfig, context: PhaseContext) -> tuple[list[PlayerSpec], str | None, str | None]:
    specs = [parse_player_spec(s) for s in cfg.players]
    if len(specs) < 2:
        raise ConfigError(f"evaluate.players (--players) needs at least two players, got {cfg.players}")
    labels = [s.label for s in specs]
    if len(set(labels)) != len(labels):
        dupes = sorted(label for label, c in Counter(labels).items() if c > 1)
        raise ConfigError(f"evaluate.players (--players) names a player twice: {', '.join(dupes)}")
    sft_model = None
    if any(s.kind == "sft" for s in specs):
        model = context.phase_storage("sft").child("model")
        if not model.exists("config.json"):
            raise StorageError(
                f"player 'sft': no model at {model.uri}: run `chess-rl sft` first, or use lm:DIR"
            )
        sft_model = model.uri if not model.is_local else model.root
    selfplay_best = None
    if any(s.kind == "mcts" and s.path is None for s in specs):
        phase = context.phase_storage("selfplay")
        if not phase.exists("best.pt"):
            raise StorageError(
                f"player 'mcts': no network at {phase.uri_of('best.pt')}: run `chess-rl selfplay` first, "
                "or use mcts:FILE.pt"
            )
        selfplay_best = phase.uri_of("best.pt") if not phase.is_local else phase.path("best.pt")
    for s in specs:
        if s.kind == "mcts" and s.path and "://" not in s.path and not Path(s.path).is_file():
            raise StorageError(f"player {s.label!r}: no network file at {s.path}")
        if s.kind == "lm" and "://" not in str(s.path) and not Path(str(s.path), "config.json").is_file():
            raise StorageError(f"player {s.label!r}: {s.path} is not a saved model folder (no config.json)")
        if s.kind == "uci" and not Path(str(s.path)).is_file():
            raise ConfigError(f"evaluate.players: player {s.label!r}: no engine at {s.path}")
    for path in cfg.suites:
        if not Path(path).is_file() and not (ROOT / path).is_file():
            raise ConfigError(f"evaluate.suites (--suites): {path} does not exist")
    return specs, sft_model, selfplay_best


def run_evaluate(context: PhaseContext) -> PhaseResult:
    import ray

    cfg = context.config.evaluate
    log = context.log
    specs, sft_model, selfplay_best = validate(cfg, context)
    seed = context.config.run.seed
    openings = (
        book_openings(cfg.openings)
        if cfg.openings
        else random_openings(max(1, (cfg.games + 1) // 2), cfg.random_plies, seed)
    )
    tasks = schedule(cfg, specs, openings, seed)
    out = context.phase_storage("evaluate").child(cfg.name)
    # results written as games finished: a re-run plays only the missing ones
    done = {name[: -len(".json")] for name in out.child("games").list_files() if name.endswith(".json")}
    pending = [t for t in tasks if t.key not in done]
    settings = Settings(
        sft_model, selfplay_best, cfg.lm_temperature, cfg.lm_retries, cfg.on_illegal, cfg.stockfish_nodes, cfg.max_plies,
        cfg.resign_cp, cfg.resign_plies,
    )  # fmt: skip
    needs_pool = (
        any(s.kind == "stockfish" for s in specs) or cfg.resign_cp is not None or cfg.quality_nodes > 0
    )
    pool = None
    if needs_pool:
        from actors.engine_pool import EnginePool

        pool = EnginePool.create(
            1, cfg.engines, run=f"{context.config.run.name}-evaluate", num_cpus_per_engine=0.5
        )
    try:
        if pool is not None:
            for s in specs:
                if s.kind == "stockfish":
                    try:
                        pool.play("8/8/8/8/8/8/6k1/4K2R w K - 0 1", s.strength(), SearchLimit(nodes=1))
                    except UserError as exc:
                        raise ConfigError(f"evaluate.players: player {s.label!r}: {exc}") from None
        log(
            f"{len(tasks)} games ({len(done & {t.key for t in tasks})} already played, {len(pending)} to play): "
            f"{cfg.mode} of {', '.join(s.label for s in specs)}; {len(openings)} openings"
        )
        actors = pool.actors if pool is not None else None
        engines = pool.engines_per_actor if pool is not None else 1
        remote_game = ray.remote(num_cpus=1, max_retries=1)(play_one)
        limit = cfg.max_parallel or max(1, int(ray.cluster_resources().get("CPU", 1)))
        started = time.perf_counter()
        inflight: dict[Any, GameTask] = {}
        queue = list(pending)
        finished = 0
        while queue or inflight:
            while queue and len(inflight) < limit:
                task = queue.pop(0)
                inflight[remote_game.remote(task, settings, actors, engines)] = task
            ready, _ = ray.wait(list(inflight), num_returns=1)
            for ref in ready:
                task = inflight.pop(ref)
                try:
                    record = ray.get(ref)
                except ray.exceptions.RayTaskError as exc:
                    if isinstance(exc.cause, UserError):
                        raise exc.cause from None
                    raise
                out.write_text(f"games/{task.key}.json", json.dumps(record))
                finished += 1
                if finished % 10 == 0 or not (queue or inflight):
                    log(f"{finished}/{len(pending)} games played ({time.perf_counter() - started:.0f} s)")
        games = [ArenaGame.from_dict(json.loads(out.read_text(f"games/{t.key}.json"))) for t in tasks]

        suite_results: list[dict[str, Any]] = []
        if cfg.suites:
            suites = [str(p if Path(p).is_file() else ROOT / p) for p in cfg.suites]
            remote_suites = ray.remote(num_cpus=1)(suite_task)
            suite_results = ray.get(remote_suites.remote(specs[0], settings, suites, actors, engines))
        quality = (
            candidate_quality(pool, specs[0].label, games, cfg.quality_nodes)
            if pool and cfg.quality_nodes
            else None
        )
    finally:
        if pool is not None:
            pool.shutdown()

    results = summarize(specs, games, suite_results, quality)
    write_outputs(out, cfg, specs, tasks, games, results, context)
    return PhaseResult(summary=results, lines=summary_lines(results, out), ok=True)


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
) -> dict[str, Any]:
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
    anchors = {s.label: s.anchor_elo for s in specs if s.anchor_elo is not None}
    ratings: dict[str, Any] = {}
    if anchors:
        try:
            fitted = rate_players([(g.white, g.black, g.score_for(g.white)) for g in games], anchors)
            ratings = {
                k: {f: getattr(v, f) for f in ("elo", "low", "high", "games", "score", "anchored")}
                for k, v in fitted.items()
            }
        except ValueError as exc:
            ratings = {"error": str(exc)}
    side = {"white": 0, "black": 0}
    legal = {"moves": 0, "first_attempt_legal": 0, "illegal_attempts": 0, "fallbacks": 0}
    for game in games:
        for color in side:
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
        "pairings": pairings,
        "ratings": ratings,
        "anchors": anchors,
        "candidate_moves": legal,
        "suites": suites,
        "quality": quality,
        "results": dict(Counter(g.result for g in games)),
    }


def _fmt_elo(value: float) -> str:
    return "+inf" if value == math.inf else "-inf" if value == -math.inf else f"{value:+.0f}"


def report_markdown(results: dict[str, Any], cfg: EvaluateConfig) -> str:
    c = results["candidate"]
    lines = [f"# Evaluation of `{c}`", "", f"{results['games']} games, {cfg.mode}; max {cfg.max_plies} plies; "
             f"openings: {cfg.openings or f'{cfg.random_plies} seeded random plies'}.", "",
             "## Score against each opponent", "", "| opponent | games | W | D | L | score | Elo difference (95% interval) |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for opp, p in results["pairings"].items():
        lines.append(
            f"| {opp} | {p['games']} | {p['wins']} | {p['draws']} | {p['losses']} | {p['score']:.1%} | "
            f"{_fmt_elo(p['elo_diff'])} ({_fmt_elo(p['elo_low'])} .. {_fmt_elo(p['elo_high'])}) |"
        )
    if results["ratings"] and "error" not in results["ratings"]:
        lines += ["", "## Elo (maximum likelihood over all games, anchored to Stockfish UCI_Elo)", "",
                  "| player | Elo | 95% interval | games | score | anchored |", "|---|---|---|---|---|---|"]  # fmt: skip
        for name, r in results["ratings"].items():
            lines.append(
                f"| {name} | {_fmt_elo(r['elo']).lstrip('+')} | {_fmt_elo(r['low']).lstrip('+')} .. "
                f"{_fmt_elo(r['high']).lstrip('+')} | {r['games']} | {r['score']:.1%} | {'yes' if r['anchored'] else ''} |"
            )
    elif results["ratings"]:
        lines += ["", f"Elo: not estimated ({results['ratings']['error']})."]
    else:
        lines += [
            "",
            "Elo: no Stockfish UCI_Elo level was played, so there is no anchor (add e.g. stockfish:elo=1350).",
        ]
    m = results["candidate_moves"]
    lines += ["", "## The candidate's moves", "",
              f"- moves: {m['moves']}; legal at the first attempt: {m['legal_rate']:.1%} (unmasked)",
              f"- illegal or unparseable attempts: {m['illegal_attempts']}; random fallbacks: {m['fallbacks']}"]  # fmt: skip
    if results["quality"]:
        q = results["quality"]
        lines.append(
            f"- average centipawn loss {q['acpl']:.0f}, accuracy {q['accuracy']:.1f}% over {q['moves']} moves ({q.get('nodes')} nodes)"
        )
    if results["suites"]:
        lines += [
            "",
            "## Test suites (bm/am, one move from the FEN)",
            "",
            "| suite | positions | solved | accuracy | legal |",
            "|---|---|---|---|---|",
        ]
        for s in results["suites"]:
            lines.append(
                f"| {s['name']} | {s['positions']} | {s['solved']} | {s['accuracy']:.1%} | {s['legal_first_attempt'] / max(1, s['positions']):.1%} |"
            )
    lines += ["", "![score](score.png)", "", "![elo](elo.png)", ""]
    return "\n".join(lines)


def plot(results: dict[str, Any], folder: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    opponents = list(results["pairings"])
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for i, opp in enumerate(opponents):
        p = results["pairings"][opp]
        n = max(1, p["games"])
        se = math.sqrt(max(p["score"] * (1 - p["score"]), 1e-9) / n)
        ax.errorbar(i, p["score"], yerr=1.96 * se, fmt="o", capsize=4)
    ax.set_xticks(range(len(opponents)), opponents, rotation=20, ha="right", fontsize=8)
    ax.set_ylim(-0.05, 1.05)
    ax.axhline(0.5, color="grey", lw=0.5)
    ax.set_ylabel(f"score of {results['candidate']}")
    ax.set_title("Score against each opponent (95% interval)")
    fig.tight_layout()
    paths.append(folder / "score.png")
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ratings = {k: v for k, v in results["ratings"].items() if k != "error"}
    for i, r in enumerate(ratings.values()):
        finite = [x for x in (r["low"], r["elo"], r["high"]) if math.isfinite(x)]
        if not finite:
            continue
        mid = r["elo"] if math.isfinite(r["elo"]) else (finite[0])
        lo = mid - r["low"] if math.isfinite(r["low"]) else 0
        hi = r["high"] - mid if math.isfinite(r["high"]) else 0
        ax.errorbar(i, mid, yerr=[[lo], [hi]], fmt="s" if r["anchored"] else "o", capsize=4)
    ax.set_xticks(range(len(ratings)), list(ratings), rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("Elo")
    ax.set_title("Elo estimates (squares: anchors)" if ratings else "Elo: no anchor played")
    fig.tight_layout()
    paths.append(folder / "elo.png")
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)
    return paths


def write_outputs(
    out: Storage,
    cfg: EvaluateConfig,
    specs: list[PlayerSpec],
    tasks: list[GameTask],
    games: list[ArenaGame],
    results: dict[str, Any],
    context: PhaseContext,
) -> None:
    pgn = "".join(
        game_pgn(g, event=f"chess-rl evaluate {cfg.name}", round_=str(i + 1)) for i, g in enumerate(games)
    )
    out.write_text("games.pgn", pgn)
    out.write_text("results.json", json.dumps(results, indent=2, sort_keys=True, default=str))
    out.write_text("report.md", report_markdown(results, cfg))
    with tempfile.TemporaryDirectory() as tmp:
        for path in plot(results, Path(tmp)):
            out.upload_file(path, path.name)
            context.tracking.log_artifact(path)
        for name in ("games.pgn", "results.json", "report.md"):
            local = Path(tmp) / name
            local.write_bytes(out.read_bytes(name))
            context.tracking.log_artifact(local)
    metrics: dict[str, float] = {}
    for opp, p in results["pairings"].items():
        key = re.sub(r"[^A-Za-z0-9_]+", "_", opp)
        metrics[f"score_vs_{key}"] = p["score"]
    c = results["candidate"]
    if c in results["ratings"] and math.isfinite(results["ratings"][c]["elo"]):
        metrics["elo"] = results["ratings"][c]["elo"]
    metrics["legal_rate"] = results["candidate_moves"]["legal_rate"]
    for s in results["suites"]:
        metrics[f"suite_{s['name']}_accuracy"] = s["accuracy"]
    if results["quality"]:
        metrics["acpl"], metrics["accuracy"] = results["quality"]["acpl"], results["quality"]["accuracy"]
    context.tracking.log_metrics(metrics)


def summary_lines(results: dict[str, Any], out: Storage) -> list[str]:
    c = results["candidate"]
    lines = ["evaluate summary", f"  candidate     {c}, {results['games']} games"]
    for opp, p in results["pairings"].items():
        lines.append(
            f"  vs {opp:<24} +{p['wins']} ={p['draws']} -{p['losses']}  score {p['score']:.1%}  "
            f"Elo diff {_fmt_elo(p['elo_diff'])} ({_fmt_elo(p['elo_low'])} .. {_fmt_elo(p['elo_high'])})"
        )
    if c in results["ratings"]:
        r = results["ratings"][c]
        lines.append(
            f"  Elo           {_fmt_elo(r['elo']).lstrip('+')} ({_fmt_elo(r['low']).lstrip('+')} .. {_fmt_elo(r['high']).lstrip('+')}), anchored to {', '.join(results['anchors'])}"
        )
    m = results["candidate_moves"]
    lines.append(
        f"  moves         {m['legal_rate']:.1%} legal at the first attempt, {m['illegal_attempts']} illegal attempts, {m['fallbacks']} fallbacks"
    )
    if results["quality"]:
        q = results["quality"]
        lines.append(f"  quality       ACPL {q['acpl']:.0f}, accuracy {q['accuracy']:.1f}%")
    for s in results["suites"]:
        lines.append(f"  suite         {s['name']}: {s['solved']}/{s['positions']} ({s['accuracy']:.1%})")
    lines.append(f"  report        {out.uri_of('report.md')}  (PGN: {out.uri_of('games.pgn')})")
    return lines


PHASE = Phase(
    name="evaluate",
    summary="evaluate: arenas of players as Ray tasks -> scores, Elo, suites, PGN and a report.",
    description=(
        "Players: random, sft, lm:DIR, stockfish[:skill=N|elo=N][,nodes=N], uci:PATH. The first is the\n"
        "candidate. Results are written as games finish; the same command resumes. Example:\n"
        "  chess-rl evaluate --players sft random stockfish:skill=0 stockfish:elo=1350 --games 20"
    ),
    section="evaluate",
    section_model=EvaluateConfig,
    run=run_evaluate,
)


def main(argv: Sequence[str] | None = None, *, prog: str | None = None) -> int:
    return run_phase(PHASE, argv, prog=prog)


if __name__ == "__main__":
    sys.exit(main())
