"""One engine API over every engine class, spelled as python-chess's ``SimpleEngine`` spells it:
``play(position, limit, *, strength=None, fresh=False) -> str`` and
``analyse(position, limit, *, multipv=1, fresh=False) -> Analysis`` (a batch of positions and a
list of analyses for a group or a pool). Checked on the signatures, so the classes cannot drift
apart again; then once on a real Stockfish."""

from __future__ import annotations

import inspect
import os
import typing
from collections.abc import Callable
from typing import Any

import chess
import chess.engine
import pytest

from actors.engine_pool import EnginePool, EnginePoolActor
from chessrl.arena.players import MoveEngine
from chessrl.engine.client import Analysis, SearchLimit, Strength, UCIEngine
from chessrl.engine.group import EngineGroup

#: Every class that plays and analyses; the pool's actor by its plain class (Ray wraps it).
ENGINES: list[type] = [UCIEngine, EngineGroup, EnginePool, EnginePoolActor.__ray_actor_class__]
POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
MATE_IN_ONE = "6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1"


def shape(fn: Callable[..., Any]) -> tuple[list[str], dict[str, Any]]:
    """A method's positional names (``self`` and Ray's ``_ray_trace_ctx`` left out) and its
    keyword-only names with their defaults.

    >>> shape(UCIEngine.play)
    (['position', 'limit'], {'strength': None, 'fresh': False})
    """
    params = [p for p in inspect.signature(fn).parameters.values() if p.name != "self" and p.name[0] != "_"]
    positional = [p.name for p in params if p.kind in POSITIONAL]
    keyword = {p.name: p.default for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}
    return positional, keyword


@pytest.mark.parametrize("cls", [*ENGINES, MoveEngine], ids=lambda c: c.__name__)
def test_play_takes_the_position_and_the_limit_then_strength_by_keyword(cls: type) -> None:
    assert shape(cls.play) == (["position", "limit"], {"strength": None, "fresh": False})
    assert typing.get_type_hints(cls.play)["return"] is str


@pytest.mark.parametrize("cls", ENGINES, ids=lambda c: c.__name__)
def test_analyse_takes_the_positions_and_the_limit_then_keywords_and_answers_analyses(cls: type) -> None:
    positional, keyword = shape(cls.analyse)
    one = cls is UCIEngine  # the single process analyses one position; the others a batch
    assert positional == ["position" if one else "positions", "limit"]
    assert {"multipv": 1, "fresh": False}.items() <= keyword.items()
    assert set(keyword) - {"multipv", "fresh", "chunk_size"} == set()
    assert typing.get_type_hints(cls.analyse)["return"] == (Analysis if one else list[Analysis])


def test_the_order_is_python_chess_own() -> None:
    for name in ("play", "analyse"):
        theirs, their_keywords = shape(getattr(chess.engine.SimpleEngine, name))
        ours, our_keywords = shape(getattr(UCIEngine, name))
        assert (len(ours), ours[1]) == (len(theirs), theirs[1]) == (2, "limit")
        # the keywords both sides have mean the same (python-chess's multipv=None is one line)
        assert set(our_keywords) & set(their_keywords) == ({"multipv"} if name == "analyse" else set())


@pytest.mark.skipif(
    not os.access("/usr/games/stockfish", os.X_OK) and not os.environ.get("STOCKFISH_PATH"),
    reason="no Stockfish",
)
def test_one_process_and_a_group_answer_the_same_calls_alike() -> None:
    limit = SearchLimit(nodes=5_000)
    with UCIEngine() as engine, EngineGroup(1) as group:
        a = engine.analyse(MATE_IN_ONE, limit, multipv=2, fresh=True)
        [b] = group.analyse([chess.Board(MATE_IN_ONE)], limit, multipv=2, fresh=True)
        assert isinstance(a, Analysis) and isinstance(b, Analysis)
        assert (a.best_move, a.score.mate, len(a.lines)) == (b.best_move, b.score.mate, 2) == ("d1d8", 1, 2)
        assert engine.play(MATE_IN_ONE, limit) == group.play(MATE_IN_ONE, limit) == "d1d8"  # full strength
        move = engine.play(chess.Board(), limit, strength=Strength(skill_level=0), fresh=True)
        assert chess.Move.from_uci(move) in chess.Board().legal_moves
        fools_mate = "rnb1kbnr/pppp1ppp/8/4p3/6Pq/5P2/PPPPP2P/RNBQKBNR w KQkq - 1 3"
        assert engine.analyse(fools_mate, limit).terminal == "checkmate"  # answered without the engine
