"""A group of Stockfish processes, Ray-free: N :class:`~chessrl.engine.client.UCIEngine` s served
by N threads, behind one LRU cache and one bounded queue, with counters (what a pool actor holds).

>>> with EngineGroup(n_engines=1) as group:  # doctest: +SKIP
...     [a] = group.analyse(["6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1"], SearchLimit(nodes=20_000))
...     (a.best_move, a.score.mate, group.play(a.fen, SearchLimit(nodes=5_000), strength=Strength(elo=2800)))
('d1d8', 1, 'd1d8')

Its calls are :class:`~chessrl.engine.client.UCIEngine`'s (python-chess's order: the position,
the limit, the rest by keyword), ``analyse`` over a batch of positions.

Bad input is an :class:`~chessrl.engine.client.InvalidPositionError` raised before anything is
queued; finished positions are answered without an engine; a full queue is a
:class:`~chessrl.engine.client.PoolBusyError` (back-pressure: wait and resubmit).
"""

from __future__ import annotations

import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import chess

from chessrl.engine.annotation import ALL_MOVES_MULTIPV, Annotation, annotate, annotation_limit
from chessrl.engine.client import (
    Analysis,
    InvalidPositionError,
    PoolBusyError,
    Score,
    SearchLimit,
    Strength,
    UCIEngine,
    board_from,
    terminal_state,
)


class LRUCache:
    """A small LRU map with hit/miss counters (thread-safe)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.hits = 0
        self.misses = 0
        self._data: OrderedDict[Any, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any) -> Any | None:
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                self.hits += 1
                return self._data[key]
            self.misses += 1
            return None

    def put(self, key: Any, value: Any) -> None:
        if self.capacity <= 0:
            return
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.capacity:
                self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)


@dataclass
class EngineStats:
    """Counters a pool reports (and an actor exports as Ray metrics)."""

    positions: int = 0  # answered, cache hits included
    searched: int = 0  # sent to an engine
    terminal: int = 0  # answered without the engine (game over)
    errors: int = 0
    latencies_s: list[float] = field(default_factory=list)
    # cache hits/misses live on EngineGroup.cache, restarts on each UCIEngine, queue depth on the
    # group: EngineGroup.snapshot() gathers them all.


class EngineGroup:
    """N Stockfish processes served by N threads, behind one cache and one bounded queue."""

    def __init__(
        self,
        n_engines: int = 1,
        *,
        path: str | None = None,
        hash_mb: int = 16,
        timeout_s: float = 10.0,
        retries: int = 2,
        cache_size: int = 100_000,
        max_queue: int = 20_000,
    ) -> None:
        if n_engines < 1:
            raise ValueError(f"n_engines must be >= 1, got {n_engines}")
        self.engines = [
            UCIEngine(path, hash_mb=hash_mb, timeout_s=timeout_s, retries=retries) for _ in range(n_engines)
        ]
        self._idle: queue.Queue[UCIEngine] = queue.Queue()
        for engine in self.engines:
            self._idle.put(engine)
        self._executor = ThreadPoolExecutor(max_workers=n_engines, thread_name_prefix="engine")
        self.cache = LRUCache(cache_size)
        self.max_queue = max_queue
        self._pending = 0
        self._lock = threading.Lock()
        self.stats = EngineStats()

    def __enter__(self) -> EngineGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        for engine in self.engines:
            engine.close()

    @property
    def pids(self) -> list[int | None]:
        return [e.pid for e in self.engines]

    def snapshot(self) -> dict[str, Any]:
        s = self.stats
        return {
            "engines": len(self.engines),
            "positions": s.positions,
            "searched": s.searched,
            "terminal": s.terminal,
            "cache_hits": self.cache.hits,
            "cache_misses": self.cache.misses,
            "restarts": sum(e.restarts for e in self.engines),
            "errors": s.errors,
            "queue_depth": self._pending,
        }

    # -- admission (bounded queue) --------------------------------------------------------------
    def _admit(self, n: int) -> None:
        if n > self.max_queue:
            raise ValueError(
                f"a batch of {n} positions can never fit the queue bound {self.max_queue}; send smaller batches"
            )
        with self._lock:
            if self._pending + n > self.max_queue:
                raise PoolBusyError(
                    f"engine queue full ({self._pending} pending, max {self.max_queue}); retry later"
                )
            self._pending += n

    def _release(self, n: int) -> None:
        with self._lock:
            self._pending -= n

    def _with_engine(self, fn: Any) -> Any:
        engine = self._idle.get()
        started = time.perf_counter()
        try:
            return fn(engine)
        finally:
            self.stats.latencies_s.append(time.perf_counter() - started)
            if len(self.stats.latencies_s) > 10_000:
                del self.stats.latencies_s[:5_000]
            self._idle.put(engine)

    # -- the API --------------------------------------------------------------------------------
    def analyse(
        self,
        positions: Sequence[str | chess.Board],
        limit: SearchLimit | Sequence[SearchLimit],
        *,
        multipv: int = 1,
        fresh: bool = False,
    ) -> list[Analysis]:
        """Analyse positions (FENs or boards) in parallel over the engines, answers in order:
        :meth:`UCIEngine.analyse <chessrl.engine.client.UCIEngine.analyse>` of each, behind the cache.

        ``limit`` is one limit for all, or one per position.
        """
        boards = [board_from(p) for p in positions]  # validate everything before queueing anything
        limits = per_position(limit, len(boards))
        self._admit(len(boards))
        try:
            results: list[Analysis | None] = [None] * len(boards)
            todo: list[tuple[int, chess.Board, SearchLimit, tuple[Any, ...]]] = []
            for i, (board, lim) in enumerate(zip(boards, limits, strict=True)):
                over = terminal_state(board)
                if over is not None:
                    results[i] = Analysis(fen=board.fen(), lines=(), terminal=over)
                    self.stats.terminal += 1
                    continue
                key = (_position_key(board), lim, multipv, fresh)
                cached = self.cache.get(key)
                if cached is not None:
                    results[i] = cached
                else:
                    todo.append((i, board, lim, key))

            def search(item: tuple[int, chess.Board, SearchLimit, tuple[Any, ...]]) -> tuple[int, Analysis]:
                i, board, lim, key = item
                analysis: Analysis = self._with_engine(
                    lambda e: e.analyse(board, lim, multipv=multipv, fresh=fresh)
                )
                self.cache.put(key, analysis)
                return i, analysis

            for i, analysis in self._map(search, todo):
                results[i] = analysis
            self.stats.searched += len(todo)
            self.stats.positions += len(boards)
            return [r for r in results if r is not None]
        finally:
            self._release(len(boards))

    def annotate(self, positions: Sequence[str | chess.Board], nodes_per_move: int) -> list[Annotation]:
        """Stockfish's value of every legal move of each position (one MultiPV search a position,
        ``nodes_per_move`` nodes for each legal move, from an empty hash), answers in order: the
        work of ``annotate`` done beside the engines, so only the records travel."""
        boards = [board_from(p) for p in positions]
        limits = [annotation_limit(b, nodes_per_move) for b in boards]
        analyses = self.analyse(boards, limits, multipv=ALL_MOVES_MULTIPV, fresh=True)
        return [annotate(b, a) for b, a in zip(boards, analyses, strict=True)]

    def score_moves(
        self, position: str | chess.Board, moves: Sequence[str], limit: SearchLimit
    ) -> list[Score]:
        """A score per candidate move, from the side to move *before* the move (higher = better)."""
        board = board_from(position)
        children = [board_from(board, [m]) for m in moves]
        after = self.analyse(children, limit)
        # The child's score is from the opponent's side: flip it.
        return [_flip(a.score) for a in after]

    def play(
        self,
        position: str | chess.Board,
        limit: SearchLimit,
        *,
        strength: Strength | None = None,
        fresh: bool = False,
    ) -> str:
        """A move (UCI) at ``strength`` (full strength when None; not cached: weak levels are
        random by design). A finished game is an InvalidPositionError."""
        board = board_from(position)
        if terminal_state(board) is not None:
            raise InvalidPositionError(f"the game is over in {board.fen()!r} ({terminal_state(board)})")
        self._admit(1)
        try:
            move = self._with_engine(lambda e: e.play(board, limit, strength=strength, fresh=fresh))
            self.stats.positions += 1
            self.stats.searched += 1
            return str(move)
        finally:
            self._release(1)

    def _map(self, fn: Any, items: Iterable[Any]) -> Iterator[Any]:
        futures = [self._executor.submit(fn, item) for item in items]
        error: BaseException | None = None
        for future in futures:
            try:
                yield future.result()
            except BaseException as exc:  # finish the others, then raise the first failure
                self.stats.errors += 1
                error = error or exc
        if error is not None:
            raise error


def per_position(limit: SearchLimit | Sequence[SearchLimit], n: int) -> list[SearchLimit]:
    """One limit per position: a single limit repeated, or the given list (checked for length)."""
    if isinstance(limit, SearchLimit):
        return [limit] * n
    limits = list(limit)
    if len(limits) != n:
        raise ValueError(f"got {len(limits)} search limits for {n} positions")
    return limits


def _position_key(board: chess.Board) -> str:
    """The cache key of a position: the FEN without move counters (they do not change a search)."""
    return board.epd()


def _flip(score: Score) -> Score:
    wdl = (score.wdl[2], score.wdl[1], score.wdl[0]) if score.wdl is not None else None
    if score.mate is not None:
        # mate in n for the opponent = mated in n for us; "mated now" (0) means we just mated
        mate = -score.mate if score.mate != 0 else 1
        return Score(cp=None, mate=mate, wdl=wdl)
    return Score(cp=-int(score.cp or 0), mate=None, wdl=wdl)
