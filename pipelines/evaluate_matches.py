"""Games between players as Ray tasks, one task per game, for every phase that plays matches
(``evaluate``'s gauntlets, ladder and SPRT; the RL phases' comparisons): the game task, the
players built inside it (models loaded through :mod:`chessrl.arena.saved_models`), the schedules
(pairs, SPRT game pairs), the ladder's calibration and the candidate's placement on it, and
:class:`Arena`, which plays a list of tasks at most ``limit`` at once and writes each game to
storage as it finishes, so a re-run plays only what is missing.

    arena = Arena(settings, pool.actors, pool.engine_counts, limit=2, log=print)
    games = arena.play(schedule_pairs([(a, b)], 10, openings, seed=7), storage.child("games"), "games")
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from chessrl.arena.game import ArenaGame, Opening, play_game, random_openings
from chessrl.arena.ladder import Ladder, LadderSettings, describe, estimate, fit_ladder, informative_rungs
from chessrl.arena.players import (
    LMPlayer,
    MCTSPlayer,
    Player,
    PlayerSpec,
    RandomPlayer,
    StockfishPlayer,
    UCIPlayer,
    model_fingerprint,
    parse_player_spec,
)
from chessrl.arena.saved_models import load_saved_model
from chessrl.arena.suites import SuitePosition, run_suite, score_cp
from chessrl.engine.client import SearchLimit
from cluster.errors import UserError
from cluster.progress import progress_line
from cluster.storage import Storage
from pipelines.config import EvaluateConfig

#: The longest gap between two progress lines of a match (and the last game always has one).
PROGRESS_EVERY_S = 15.0
#: CPUs each Stockfish of a match's engine pool reserves (it adjudicates, checks resignations,
#: plays the engine players): half, as the games beside it are one thread each.
POOL_CPUS_PER_ENGINE = 0.5


def match_figures(games: Iterable[ArenaGame]) -> str:
    """``12 decisive, 18 drawn, 87 plies on average`` over the games finished so far.

    >>> match_figures([ArenaGame("a", "b", "1-0", "checkmate", ["e2e4"] * 40),
    ...                ArenaGame("b", "a", "1/2-1/2", "max_plies", ["e2e4"] * 120)])
    '1 decisive, 1 drawn, 80 plies on average'
    """
    games = list(games)
    decisive = sum(g.result in ("1-0", "0-1") for g in games)
    plies = sum(len(g.moves) for g in games) / max(1, len(games))
    return f"{decisive} decisive, {len(games) - decisive} drawn, {plies:.0f} plies on average"


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
    adjudicate_cp: int | None = None


_MODELS: dict[str, tuple[Any, Any]] = {}  # per worker process: Ray reuses workers across tasks


def build_player(spec: PlayerSpec, settings: Settings, pool: Any) -> Player:
    """The player a spec names (language models are loaded once per worker process)."""
    if spec.kind == "random":
        return RandomPlayer(spec.label)
    if spec.kind in ("sft", "lm"):
        path = settings.sft_model if spec.kind == "sft" else spec.path
        assert path is not None
        if path not in _MODELS:
            _MODELS[path] = load_saved_model(path, "policy")
        model, tokenizer = _MODELS[path]
        return LMPlayer(
            model,
            tokenizer,
            name=spec.label,
            temperature=settings.lm_temperature,
            retries=settings.lm_retries,
            on_illegal=settings.on_illegal,  # type: ignore[arg-type]
            text_format=getattr(model.config, "chessrl_text_format", None) or "moves",
            masked=spec.masked,
        )
    if spec.kind == "judge":
        from chessrl.rl.judge_player import JudgePlayer

        assert spec.path is not None
        if spec.path not in _MODELS:
            _MODELS[spec.path] = load_saved_model(spec.path, "reward")
        return JudgePlayer(*_MODELS[spec.path], name=spec.label)
    if spec.kind == "mcts":
        path = spec.path or settings.selfplay_best
        assert path is not None
        if path not in _MODELS:
            _MODELS[path] = (load_saved_model(path, "network"), None)
        return MCTSPlayer(
            _MODELS[path][0], spec.simulations or 32, name=spec.label, search=spec.search or "puct"
        )
    limit = spec.search_limit(settings.stockfish_nodes)
    if spec.kind == "stockfish":
        return StockfishPlayer(
            pool, spec.strength(), limit, name=spec.label, random_share=(spec.random_share or 0) / 100
        )
    assert spec.path is not None
    return UCIPlayer(spec.path, limit, name=spec.label)


def _pool(actors: list[Any] | None, engines: int | list[int]) -> Any:
    if not actors:
        return None
    from actors.engine_pool import EnginePool

    return EnginePool(actors, engines)


def play_one(
    task: GameTask, settings: Settings, pool_actors: list[Any] | None, engines: int | list[int]
) -> dict[str, Any]:
    """A Ray task: play one game and return it as a dict."""
    pool = _pool(pool_actors, engines)
    white = build_player(task.white, settings, pool)
    black = build_player(task.black, settings, pool)
    evaluator = None
    if (settings.resign_cp is not None or settings.adjudicate_cp is not None) and pool is not None:

        def evaluator(fen: str) -> int | None:
            [analysis] = pool.analyse([fen], SearchLimit(nodes=2000))
            return score_cp(analysis.score)

    try:
        game = play_game(
            white,
            black,
            opening=task.opening,
            max_plies=settings.max_plies,
            seed=task.seed,
            evaluator=evaluator,
            resign_cp=settings.resign_cp,
            resign_plies=settings.resign_plies,
            adjudicate_cp=settings.adjudicate_cp,
        )
    finally:
        white.close()
        black.close()
    return {"key": task.key, **game.to_dict()}


def suite_task(
    spec: PlayerSpec,
    settings: Settings,
    suites: Sequence[tuple[str, Sequence[SuitePosition]]],
    pool_actors: list[Any] | None,
    engines: int | list[int],
) -> list[dict[str, Any]]:
    """A Ray task: the candidate on every EPD suite, ``(name, positions)`` as the driver read
    them (:func:`chessrl.arena.suites.read_epd_suite`, before any game)."""
    player = build_player(spec, settings, _pool(pool_actors, engines))
    try:
        out = []
        for name, positions in suites:
            result = run_suite(player, name, positions)
            out.append({**result.__dict__, "accuracy": result.accuracy})
        return out
    finally:
        player.close()


def schedule_pairs(
    pairs: Sequence[tuple[PlayerSpec, PlayerSpec]],
    games: int,
    openings: list[Opening],
    seed: int,
    prefix: str = "",
) -> list[GameTask]:
    """``games`` games for each pair of players, colours alternating and each opening played from
    both sides, in a stable order with stable keys (a key names the game's result file)."""
    tasks = []
    for p, (a, b) in enumerate(pairs):
        for g in range(games):
            white, black = (a, b) if g % 2 == 0 else (b, a)
            slug = re.sub(r"[^A-Za-z0-9=.-]+", "_", f"{a.label}-vs-{b.label}")[:80]
            opening = openings[(g // 2) % len(openings)]
            tasks.append(
                GameTask(
                    f"{prefix}{p:02d}-{slug}-{g:04d}", white, black, opening, seed * 100_003 + p * 10_007 + g
                )
            )
    return tasks


def check_players(
    game: ArenaGame,
    task: GameTask,
    uri: str,
    models: dict[str, Any] | None = None,
    current: dict[str, str | None] | None = None,
) -> None:
    """A saved game resumes only the task it was played for: the same players in the same colours,
    and the same models (``models``: the game file's :func:`model_fingerprint` of each side, when it
    has them; ``current``: each player label's fingerprint now, computed here when not given). A
    match re-run with other players, or after a model was trained again into the same folder, would
    otherwise count the old games as this match's.

    >>> from chessrl.arena.players import parse_player_spec
    >>> task = GameTask("pair-00000-a-white", parse_player_spec("random"), parse_player_spec("stockfish"),
    ...                 Opening(moves=()), 1)
    >>> check_players(ArenaGame("random", "stockfish", "1-0", "checkmate", []), task, "g.json")
    >>> check_players(ArenaGame("lm:/old/model", "stockfish", "1-0", "checkmate", []), task, "g.json")
    Traceback (most recent call last):
    cluster.errors.UserError: g.json holds a game of lm:/old/model (white) against stockfish (black); this run's game pair-00000-a-white is random against stockfish: the players changed since that game was played (a model is named by its path). Use another --run-name, or the players this match was started with
    """
    if (game.white, game.black) != (task.white.label, task.black.label):
        raise UserError(
            f"{uri} holds a game of {game.white} (white) against {game.black} (black); this run's game {task.key} "
            f"is {task.white.label} against {task.black.label}: the players changed since that game was played "
            "(a model is named by its path). Use another --run-name, or the players this match was started with"
        )
    for side, spec in (("white", task.white), ("black", task.black)):
        then = (models or {}).get(side)
        now = current[spec.label] if current is not None else model_fingerprint(spec)
        if then and now and then != now:
            raise UserError(
                f"{uri} was played by {spec.label} ({side}) as its files were then; they have changed since "
                "(a model trained again into the same folder?), so this match's saved games are not its games. "
                "Use another --run-name, or delete that game folder to play them again"
            )


def game_cpus(limit: int, cpus: float, reserved: float = 0.0) -> float:
    """The CPUs each game task asks for, so that ``limit`` games fit on ``cpus`` beside
    ``reserved`` (the engine pool's): at most one (a game is one thread), at least 0.1.

    >>> game_cpus(2, cpus=2, reserved=0.5)  # two games beside an adjudicating engine on 2 CPUs
    0.75
    >>> game_cpus(2, cpus=2)
    1.0
    """
    share = (cpus - reserved) / max(1, limit)
    return max(0.1, min(1.0, math.floor(share * 100) / 100))


@dataclass
class Arena:
    """Plays game tasks as Ray tasks, at most ``limit`` at once, each result written to storage
    as it finishes; a task whose file exists is not played again (so every caller resumes).
    Each task asks for ``cpus_per_game`` CPUs (:func:`game_cpus` sizes it so that ``limit``
    games run beside the engine pool: a whole CPU each let one game run at a time on 2 CPUs)."""

    settings: Settings
    actors: list[Any] | None
    engines: int | list[int]
    limit: int
    log: Callable[[str], None]
    cpus_per_game: float = 1.0

    def play(
        self,
        tasks: Sequence[GameTask],
        folder: Storage,
        what: str,
        stop: Callable[[dict[str, ArenaGame]], bool] | None = None,
    ) -> dict[str, ArenaGame]:
        """Every task's game by key: those already under ``folder`` and the ones played now.
        ``stop(finished)`` after each game ends the match early (games in flight still finish)."""
        import ray

        on_disk = {name[: -len(".json")] for name in folder.list_files() if name.endswith(".json")}
        records = {t.key: json.loads(folder.read_text(f"{t.key}.json")) for t in tasks if t.key in on_disk}
        finished = {key: ArenaGame.from_dict(record) for key, record in records.items()}
        # each model's files read once a match, not once a game
        prints = {s.label: model_fingerprint(s) for t in tasks for s in (t.white, t.black)}
        for t in tasks:
            if t.key in finished:
                check_players(
                    finished[t.key], t, folder.uri_of(f"{t.key}.json"), records[t.key].get("models"), prints
                )
        queue = [t for t in tasks if t.key not in on_disk]
        self.log(f"{what}: {len(tasks)} games ({len(finished)} already played, {len(queue)} to play)")
        if stop is not None and stop(finished):
            return finished
        remote_game = ray.remote(num_cpus=self.cpus_per_game, max_retries=1)(play_one)
        started, played, total = time.perf_counter(), 0, len(queue)
        shown = started
        inflight: dict[Any, GameTask] = {}
        while queue or inflight:
            while queue and len(inflight) < self.limit:
                task = queue.pop(0)
                inflight[remote_game.remote(task, self.settings, self.actors, self.engines)] = task
            ready, _ = ray.wait(list(inflight), num_returns=1)
            for ref in ready:
                task = inflight.pop(ref)
                try:
                    record = ray.get(ref)
                except ray.exceptions.RayTaskError as exc:
                    if isinstance(exc.cause, UserError):
                        raise exc.cause from None
                    raise
                models = {"white": prints[task.white.label], "black": prints[task.black.label]}
                folder.write_text(f"{task.key}.json", json.dumps({**record, "models": models}))
                finished[task.key] = ArenaGame.from_dict(record)
                played += 1
                if stop is not None and stop(finished):
                    queue.clear()
                now = time.perf_counter()
                if now - shown >= PROGRESS_EVERY_S or not (queue or inflight):
                    self.log(
                        f"{what}: "
                        + progress_line(
                            "game",
                            played,
                            total,
                            elapsed_s=now - started,
                            start=0,
                            figures=match_figures(finished.values()),
                        )
                    )
                    shown = now
        return finished


def sized_arena(settings: Settings, pool: Any, limit: int | None, log: Callable[[str], None]) -> Arena:
    """An :class:`Arena` of ``limit`` games at once (None: the cluster's CPUs), its game tasks
    sized by :func:`game_cpus` to fit beside ``pool`` (an EnginePool, or None)."""
    from cluster.capacity import sizing_cpus

    cpus = sizing_cpus()[0]
    limit = limit or cpus
    reserved = POOL_CPUS_PER_ENGINE * pool.engines if pool is not None else 0.0
    actors, engines = (pool.actors, pool.engine_counts) if pool is not None else (None, 1)
    return Arena(settings, actors, engines, limit, log, game_cpus(limit, cpus, reserved))


def triples(games: Iterable[ArenaGame]) -> list[tuple[str, str, float]]:
    """``(white, black, white's score)`` of each game, as the rating fits read them."""
    return [(g.white, g.black, g.score_for(g.white)) for g in games]


def ensure_ladder(arena: Arena, ls: LadderSettings, root: Storage, build: str) -> tuple[Ladder, int]:
    """The ladder for these settings and this Stockfish build: read from ``<storage>/ladder/<key>``
    when it was rated with the same build, otherwise rated now (its games resume like any other).
    Returns the ladder and how many calibration games this call played."""
    folder = root.child(f"ladder/{ls.key()}")
    if folder.exists("ladder.json"):
        try:
            ladder = Ladder.from_json(folder.read_text("ladder.json"))
        except (ValueError, KeyError, TypeError) as exc:
            arena.log(f"ladder: {folder.uri_of('ladder.json')} is unreadable ({exc}): rating the rungs again")
        else:
            if ladder.stockfish == build and ladder.settings_key == ls.key():
                arena.log(
                    f"ladder: reusing {folder.uri_of('ladder.json')} ({ladder.games} games, {build}); no ladder games to play"
                )
                return ladder, 0
            arena.log(
                f"ladder: {folder.uri_of('ladder.json')} was rated with {ladder.stockfish}, this is {build}: "
                "rating the rungs again with this build"
            )
    specs = {s.label: s for s in (parse_player_spec(r) for r in ls.rungs)}
    openings = random_openings(max(1, (ls.games + 1) // 2), ls.random_plies, ls.seed)
    tasks = schedule_pairs([(specs[a], specs[b]) for a, b in ls.pairs()], ls.games, openings, ls.seed)
    games_folder = folder.child(f"games/{hashlib.sha256(build.encode()).hexdigest()[:12]}")
    before = len(games_folder.list_files())
    games = arena.play(tasks, games_folder, "ladder calibration")
    played = len(games_folder.list_files()) - before
    ladder = fit_ladder(triples(games.values()), ls, build)
    folder.write_text("ladder.json", ladder.to_json())
    arena.log("ladder rated:\n  " + "\n  ".join(describe(ladder)))
    return ladder, played


def place_on_ladder(
    arena: Arena,
    cfg: EvaluateConfig,
    candidate: PlayerSpec,
    ls: LadderSettings,
    ladder: Ladder,
    earlier: list[ArenaGame],
    out: Storage,
    seed: int,
) -> tuple[list[ArenaGame], dict[str, Any]]:
    """The candidate's games against the rungs: a placement match against every rung, then more
    games against the rungs where its estimated score is informative."""
    specs = {s.label: s for s in (parse_player_spec(r) for r in ls.rungs)}
    openings = random_openings(
        max(1, cfg.ladder_match_games, cfg.placement_games), cfg.random_plies, seed + 1
    )
    folder = out.child("ladder-games")
    placement = arena.play(
        schedule_pairs(
            [(candidate, specs[r]) for r in ladder.ratings], cfg.placement_games, openings, seed + 1, "place-"
        ),
        folder,
        "ladder placement",
    )
    fixed = {label: ladder.elo(label) for label in ladder.ratings}
    rated = [*earlier, *placement.values()]
    informative = informative_rungs(ladder, estimate(candidate.label, triples(rated), fixed))
    more: dict[str, ArenaGame] = {}
    if cfg.ladder_match_games:
        tasks = schedule_pairs(
            [(candidate, specs[r]) for r in informative], cfg.ladder_match_games, openings, seed + 2, "match-"
        )
        more = arena.play(tasks, folder, f"ladder match against {', '.join(informative)}")
    games = [*placement.values(), *more.values()]
    return games, {"informative": informative, "placement_games": len(placement), "match_games": len(more)}


def sprt_tasks(specs: list[PlayerSpec], openings: list[Opening], games: int, seed: int) -> list[GameTask]:
    """Game pairs: pair ``i`` plays opening ``i`` twice, A with white then with black."""
    a, b = specs
    tasks = []
    for i in range(max(1, games // 2)):
        opening = openings[i % len(openings)]
        tasks.append(GameTask(f"pair-{i:05d}-a-white", a, b, opening, seed * 100_003 + 2 * i))
        tasks.append(GameTask(f"pair-{i:05d}-b-white", b, a, opening, seed * 100_003 + 2 * i + 1))
    return tasks
