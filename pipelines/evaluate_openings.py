"""``evaluate``'s inputs, checked before Ray starts, and what its games start from: the players,
the ladder, the models they load, the opening book, the EPD suites and the games table of held-out
openings (:func:`check_evaluate`, the phase's check, gives :class:`EvaluateInputs`); the openings
of the gauntlet, round robin or SPRT games and their record (:func:`arena_openings`); whom each
``lm:`` player played in its own training games (:func:`trained_against`). No Ray, no games::

    found = check_evaluate(config, Inputs.of_context(context))
    openings, record = arena_openings(config, found, context.log)
    trained = trained_against(found.specs, found.sft_model, config.evaluate.mode == "sprt", context.log)

Without a games table (no run, no ``--positions-from``) the held-out openings fall back to seeded
random ones, said in one log line:

>>> import tempfile
>>> config = ChessRLConfig.model_validate({"run": {"storage": tempfile.mkdtemp(), "name": "r", "seed": 7},
...     "evaluate": {"players": ["random", "stockfish:skill=0"], "suites": [], "games": 4}})
>>> found = check_evaluate(config, Inputs(Storage.from_uri(config.run.storage).child("r")))
>>> [s.label for s in found.specs], found.positions_from
(['random', 'stockfish:skill=0'], None)
>>> openings, record = arena_openings(config, found, print)  # doctest: +ELLIPSIS
openings: no held-out games to open from (no games table at ...): 4 seeded random plies instead; ...
>>> record["source"], record["count"], len(openings)
('random', 2, 2)
>>> trained_against(found.specs, found.sft_model, False, print)
{'training_opponents': {}}
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chessrl.arena.eval_report import openings_text
from chessrl.arena.game import Opening, book_openings, heldout_openings, random_openings
from chessrl.arena.ladder import LadderSettings
from chessrl.arena.players import PlayerSpec, parse_player_spec
from chessrl.arena.suites import SuitePosition, read_epd_suite
from cluster.errors import ConfigError, InputDataError, StorageError, UserError
from cluster.storage import Storage, split_uri
from pipelines.common.phase import Inputs, gpt2_config, location, readable_model, saved_model
from pipelines.config import ChessRLConfig, EvaluateConfig
from pipelines.evaluate_opponents import in_distribution_notes, training_opponents

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class EvaluateInputs:
    """What ``evaluate`` reads, checked: the players, the models and networks they load, the
    opening book and the test suites (parsed whole)."""

    specs: list[PlayerSpec]
    sft_model: str | None
    selfplay_best: str | None
    openings: list[Opening] | None  # the book's; None: held-out or seeded random openings
    suites: list[tuple[str, list[SuitePosition]]]  # (name, positions)
    positions_from: Storage | None = None  # paired, heldout openings: the games table of the held-out games
    no_heldout: str = ""  # heldout openings without a games table: why (then random openings)


def check_evaluate(config: ChessRLConfig, inputs: Inputs) -> EvaluateInputs:
    """Every input of ``evaluate``, before any game: the players (syntax, count, names), the
    ladder, the sft model and self-play network the ``sft`` and ``mcts`` players load, each
    ``lm:``/``mcts:``/``uci:`` path and the model or network it names (readable: see
    :func:`chessrl.arena.saved_models.check_saved_model`), the opening book and every EPD suite,
    read to the end, the games table of held-out openings (:func:`heldout_source`). A model an
    earlier phase of the same graph run writes is taken as given."""
    cfg = config.evaluate
    specs = check_player_specs(cfg)
    ladder_settings(cfg, config.run.seed)
    sft_model, selfplay_best = run_models(specs, inputs)
    if sft_model is not None and not inputs.will_write("sft"):
        readable_model(sft_model, "player 'sft'")
    if selfplay_best is not None and not inputs.will_write("selfplay"):
        readable_model(selfplay_best, "player 'mcts'", "network")
    for s in specs:  # paired mode reads each model's legal-masked moves: a maskable tokenizer
        check_player_inputs(
            dataclasses.replace(s, masked=True) if cfg.mode == "paired" and s.kind != "judge" else s,
            sft_model,
            inputs,
        )
    openings = None
    if cfg.openings:
        try:
            openings = book_openings(cfg.openings)
        except InputDataError as exc:
            raise InputDataError(f"evaluate.openings (--openings): {exc}") from None
    positions_from, no_heldout = positions_source(config, inputs) if cfg.mode == "paired" else None, ""
    if cfg.mode != "paired" and not cfg.openings and cfg.opening_source == "heldout":
        positions_from, no_heldout = heldout_source(config, inputs)
    suites = []
    for path in cfg.suites if cfg.mode != "paired" else []:
        if not Path(suite_path(path)).is_file():
            raise ConfigError(f"evaluate.suites (--suites): {path} does not exist")
        try:
            suites.append((Path(path).stem, read_epd_suite(suite_path(path))))
        except InputDataError as exc:
            raise InputDataError(f"evaluate.suites (--suites): {exc}") from None
    return EvaluateInputs(specs, sft_model, selfplay_best, openings, suites, positions_from, no_heldout)


def check_player_specs(cfg: EvaluateConfig) -> list[PlayerSpec]:
    """The players parsed: at least two (exactly two for an SPRT), no name twice."""
    specs = [parse_player_spec(s) for s in cfg.players]
    if cfg.mode == "sprt" and len(specs) != 2:
        raise ConfigError(
            f"evaluate.players (--players): --mode sprt plays exactly two players (A against B), got {len(specs)}: "
            f"{' '.join(cfg.players)}"
        )
    if len(specs) < 2:
        raise ConfigError(f"evaluate.players (--players) needs at least two players, got {cfg.players}")
    labels = [s.label for s in specs]
    if len(set(labels)) != len(labels):
        dupes = sorted(label for label, c in Counter(labels).items() if c > 1)
        raise ConfigError(f"evaluate.players (--players) names a player twice: {', '.join(dupes)}")
    player_pairs(cfg, len(specs))  # a pair naming no player: one line before Ray
    if cfg.mode == "paired":
        if others := [s.label for s in specs if s.kind not in ("lm", "sft", "judge")]:
            raise ConfigError(
                f"evaluate.players (--players): --mode paired compares models' moves (lm:DIR, sft or "
                f"judge:DIR), not {', '.join(others)}"
            )
        if cfg.quality_nodes == 0:
            raise ConfigError(
                "evaluate.quality_nodes (--quality-nodes): --mode paired scores the moves with Stockfish: "
                "give it more than 0 nodes"
            )
    return specs


def player_pairs(cfg: EvaluateConfig, n: int) -> list[tuple[int, int]]:
    """``evaluate.pairs`` as index pairs, each checked against the ``n`` players; not with sprt.

    >>> player_pairs(EvaluateConfig(players=["sft", "random", "stockfish"], pairs=["0-2", "1-2"]), 3)
    [(0, 2), (1, 2)]
    """
    if cfg.pairs and cfg.mode in ("sprt", "paired"):
        raise ConfigError(
            f"evaluate.pairs (--pairs): --mode {cfg.mode} pairs its players itself; leave pairs empty"
        )
    out = []
    for pair in cfg.pairs:
        i, j = (int(x) for x in pair.split("-"))
        if max(i, j) >= n:
            raise ConfigError(
                f"evaluate.pairs (--pairs): {pair} names player {max(i, j)}, but there are {n} players (0 .. {n - 1})"
            )
        if (i, j) in out or (j, i) in out:
            raise ConfigError(f"evaluate.pairs (--pairs): {pair} is there twice")
        out.append((i, j))
    return out


def ladder_settings(cfg: EvaluateConfig, seed: int) -> LadderSettings | None:
    """The ladder the candidate is rated on, or None (off, an SPRT match, or paired)."""
    if not cfg.ladder or cfg.mode in ("sprt", "paired"):
        return None
    try:
        return LadderSettings(
            tuple(cfg.ladder_rungs), cfg.ladder_games, cfg.max_plies, cfg.random_plies, seed
        )
    except ValueError as exc:
        raise ConfigError(f"evaluate.ladder_rungs (--ladder-rungs): {exc}") from None


def suite_path(path: str) -> str:
    """A suite file as given, or relative to the repository (the presets name tests/data/epd)."""
    return path if Path(path).is_file() or not (ROOT / path).is_file() else str(ROOT / path)


def positions_source(config: ChessRLConfig, inputs: Inputs) -> Storage:
    """The games table ``--mode paired`` draws its held-out positions from (``evaluate.positions_from``,
    else this run's prepare/games), checked unless an earlier phase of the graph run writes it."""
    from pipelines.common.artifacts import games_table

    given = config.evaluate.positions_from
    source = Storage.from_uri(given) if given else inputs.folder("prepare").child("games")
    if given or not inputs.will_write("prepare"):
        try:
            games_table(source)
        except UserError as exc:
            key = "evaluate.positions_from (--positions-from)" if given else "evaluate --mode paired"
            raise type(exc)(f"{key}: {exc}") from None
    return source


def heldout_source(config: ChessRLConfig, inputs: Inputs) -> tuple[Storage | None, str]:
    """The games table whose held-out games give the arena's openings (``opening_source`` heldout):
    ``evaluate.positions_from`` (checked: a bad one is an error), else this run's prepare/games
    where it is there (or an earlier phase of the graph run writes it); else ``(None, why)``: the
    games get random openings (many evaluate engines with no run)."""
    from pipelines.common.artifacts import games_table

    if config.evaluate.positions_from:
        return positions_source(config, inputs), ""
    source = inputs.folder("prepare").child("games")
    if inputs.will_write("prepare"):
        return source, ""
    try:
        games_table(source)
    except StorageError:
        return None, f"no games table at {source.uri}"
    except UserError as exc:
        return None, str(exc)
    return source, ""


def run_models(specs: list[PlayerSpec], inputs: Inputs) -> tuple[str | None, str | None]:
    """This run's sft model and self-play network, where an ``sft`` or bare ``mcts`` player
    plays them: there, or written by an earlier phase of the graph run."""
    sft_model = None
    if any(s.kind == "sft" for s in specs):
        model = inputs.folder("sft").child("model")
        if not inputs.will_write("sft") and not model.exists("config.json"):
            raise StorageError(
                f"player 'sft': no model at {model.uri}: run `chess-rl sft` first, or use lm:DIR"
            )
        sft_model = location(model)
    selfplay_best = None
    if any(s.kind == "mcts" and s.path is None for s in specs):
        phase = inputs.folder("selfplay")
        if not inputs.will_write("selfplay") and not phase.exists("best.pt"):
            raise StorageError(
                f"player 'mcts': no network at {phase.uri_of('best.pt')}: run `chess-rl selfplay` first, "
                "or use mcts:FILE.pt"
            )
        selfplay_best = phase.uri_of("best.pt") if not phase.is_local else phase.path("best.pt")
    return sft_model, selfplay_best


def check_player_inputs(s: PlayerSpec, sft_model: str | None, inputs: Inputs) -> None:
    """What one player loads: an ``mcts:`` network and an ``lm:`` model readable, a ``judge:``
    a reward model, a masked
    model's tokenizer one move a token, a ``uci:`` engine there. A model an earlier phase of the
    graph run writes is taken as given."""
    written = {location(inputs.folder(p).child("model")) for p in inputs.produced}
    path = sft_model if s.kind == "sft" else s.path
    if s.kind == "mcts" and s.path:
        if not _file_exists(s.path):
            raise StorageError(f"player {s.label!r}: no network file at {s.path}")
        readable_model(s.path, f"player {s.label!r}", "network")
    if s.kind == "lm" and str(s.path) not in written:
        saved_model(str(s.path), f"player {s.label!r}")
        readable_model(str(s.path), f"player {s.label!r}")
    if s.kind == "judge" and str(s.path) not in written:
        gpt2_config(
            str(s.path),
            f"player {s.label!r}",
            "GPT2ForSequenceClassification",
            "a judge: player plays a reward model (`chess-rl reward`'s output); a policy is lm:DIR",
        )
    if (
        s.masked
        and path is not None
        and str(path) not in written
        and not (s.kind == "sft" and inputs.will_write("sft"))
    ):
        from chessrl.lm.checkpoints import load_tokenizer
        from chessrl.lm.masked import check_maskable

        check_maskable(load_tokenizer(str(path)), f"evaluate.players (--players): player {s.label!r}")
    if s.kind == "uci" and not Path(str(s.path)).is_file():
        raise ConfigError(f"evaluate.players: player {s.label!r}: no engine at {s.path}")


def _file_exists(path: str) -> bool:
    if "://" not in path or path.startswith("file://"):
        return Path(path.removeprefix("file://")).is_file()
    storage, name = split_uri(path)
    return storage.exists(name)


def arena_openings(
    config: ChessRLConfig, found: EvaluateInputs, log: Callable[[str], None]
) -> tuple[list[Opening], dict[str, Any]]:
    """The games' openings and their record (results.json's ``openings``): the book's, else
    (``opening_source`` heldout, the default) the first ``opening_plies`` moves of held-out games
    (sft.heldout_fraction, split as paired mode does) of :func:`heldout_source`'s table, else
    ``random_plies`` seeded random moves. Held-out ones fall back to random ones, said in one log
    line, where there is no table or no held-out game in it; ``--seed`` seeds them all."""
    from chessrl.lm.lm_data import split_games
    from pipelines.common.artifacts import read_games

    cfg, seed, n = config.evaluate, config.run.seed, max(1, (config.evaluate.games + 1) // 2)
    if found.openings:
        book = {"source": "book", "seed": seed, "plies": None, "from": cfg.openings}
        return found.openings, {**book, "count": len(found.openings)}
    why = ""
    if cfg.opening_source == "heldout":
        source, why = found.positions_from, found.no_heldout
        if source is not None:
            train, held, _ = split_games(read_games(source), config.sft.heldout_fraction)
            openings = heldout_openings(held, n, seed, cfg.opening_plies)
            record = {
                "source": "heldout",
                "seed": seed,
                "plies": list(cfg.opening_plies),
                "from": source.uri,
                "count": len(openings),
            }
            if openings:
                log(f"openings: {openings_text(record)}")
                return openings, record
            why = (
                f"{source.uri}: {len(held)} of its {len(train) + len(held)} games held out (sft.heldout_fraction "
                f"{config.sft.heldout_fraction:g}), none playable at plies {cfg.opening_plies[0]}-{cfg.opening_plies[1]}"
            )
        log(
            f"openings: no held-out games to open from ({why}): {cfg.random_plies} seeded random plies instead; "
            "give --positions-from TABLE for held-out openings, or --set evaluate.opening_source=random for random ones"
        )
    openings = random_openings(n, cfg.random_plies, seed)
    record = {"source": "random", "seed": seed, "plies": cfg.random_plies, "from": None}
    return openings, {**record, "count": len(openings), **({"fallback": why} if why else {})}


def trained_against(
    specs: list[PlayerSpec], sft_model: str | None, sprt: bool, log: Callable[[str], None]
) -> dict[str, Any]:
    """``training_opponents``: whom each ``lm:`` player played in its own training games
    (:func:`pipelines.evaluate_opponents.training_opponents`; a player without any is left out),
    and in an SPRT ``notes``: a line, also logged, for a player trained against the other."""
    opponents = {s.label: o for s in specs if s.kind == "lm" and (o := training_opponents(str(s.path)))}
    if not sprt:
        return {"training_opponents": opponents}
    notes = in_distribution_notes(specs, opponents, sft_model)
    for note in notes:
        log(note)
    return {"training_opponents": opponents, "notes": notes}
