"""Stockfish over UCI, Ray-free: one process (:class:`UCIEngine`), the typed requests and answers
(:class:`SearchLimit`, :class:`Score`, :class:`Analysis`, :class:`Strength`) and the errors; a
group of processes with a cache, a bounded queue, restarts and counters is
:class:`chessrl.engine.group.EngineGroup`.

>>> with UCIEngine() as engine:  # doctest: +SKIP
...     a = engine.analyse("6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1", SearchLimit(nodes=20_000))
...     a.best_move, a.score.mate, engine.play(a.fen, SearchLimit(nodes=5_000), strength=Strength(elo=2800))
('d1d8', 1, 'd1d8')

Every engine class spells its calls as python-chess's ``SimpleEngine`` does: the position, then
the limit, the rest by keyword: ``play(position, limit, *, strength=None, fresh=False) -> str``
(the move, UCI) and ``analyse(position, limit, *, multipv=1, fresh=False) -> Analysis``;
:class:`~chessrl.engine.group.EngineGroup` and :class:`actors.engine_pool.EnginePool` take a
batch of positions to ``analyse`` and answer a list of :class:`Analysis`, in order.

Every engine call runs under a watchdog: a search that takes longer than its deadline (a hung
engine, a ``SIGSTOP``) gets the process killed, a new one started, and the request retried, at
most ``retries`` times. A process that died mid-request (``kill -9``) is handled the same way.
Bad input (a FEN that is not a position, an illegal move) is an :class:`InvalidPositionError`
raised before the engine sees it, so the engine is never harmed by it. Finished positions
(mate, stalemate, insufficient material) are answered without the engine.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import chess
import chess.engine

from chessrl.engine.uci import PipeEngine
from cluster.errors import UserError

DEBIAN_STOCKFISH = "/usr/games/stockfish"
# UCI_Elo accepted by some Stockfish (16+: 1320-3190; Debian's 15.1: 1350-2850). Each engine
# checks a request against its own advertised range before playing.
UCI_ELO_RANGE = (1320, 3190)
MATE_CP = 100_000  # a mate in n is worth MATE_CP - n centipawns


class EngineError(RuntimeError):
    """The engine failed in a way retries did not fix."""


class EngineNotFoundError(UserError, EngineError):
    """No Stockfish binary where we look."""


class InvalidPositionError(UserError, ValueError):
    """A FEN that is not a legal position, or a move that is not legal in it."""


class UnsupportedOptionError(UserError, ValueError):
    """A strength or option the installed Stockfish does not offer (e.g. UCI_Elo out of its range)."""


class PoolBusyError(EngineError):
    """The queue is full: the caller should wait and resubmit (back-pressure)."""


def find_stockfish(explicit: str | None = None) -> str:
    """The Stockfish binary: ``explicit``, ``STOCKFISH_PATH``, ``stockfish`` on PATH, Debian's."""
    for candidate, origin in (
        (explicit, "the engine path"),
        (os.environ.get("STOCKFISH_PATH"), "STOCKFISH_PATH"),
    ):
        if candidate:
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
            raise EngineNotFoundError(f"{origin}={candidate!r} is not an executable file")
    on_path = shutil.which("stockfish")
    if on_path:
        return on_path
    if os.path.isfile(DEBIAN_STOCKFISH) and os.access(DEBIAN_STOCKFISH, os.X_OK):
        return DEBIAN_STOCKFISH
    raise EngineNotFoundError(
        "Stockfish not found (looked at STOCKFISH_PATH, PATH and /usr/games/stockfish): install it with "
        "'apt-get install stockfish' (Debian/Ubuntu) or 'brew install stockfish' (macOS), or set STOCKFISH_PATH"
    )


# ---------------------------------------------------------------------------------------------
# typed requests and answers


@dataclass(frozen=True)
class SearchLimit:
    """How long to search: nodes, depth and/or seconds (the first reached stops the search).

    >>> SearchLimit(nodes=10_000)
    SearchLimit(nodes=10000, depth=None, time=None)
    >>> SearchLimit()
    Traceback (most recent call last):
    ...
    ValueError: a search limit needs nodes, depth or time
    """

    nodes: int | None = None
    depth: int | None = None
    time: float | None = None

    def __post_init__(self) -> None:
        if self.nodes is None and self.depth is None and self.time is None:
            raise ValueError("a search limit needs nodes, depth or time")
        for name in ("nodes", "depth", "time"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"search limit {name} must be > 0, got {value}")

    def to_chess(self) -> chess.engine.Limit:
        return chess.engine.Limit(nodes=self.nodes, depth=self.depth, time=self.time)

    def deadline_s(self, base_s: float) -> float:
        """Generous wall-clock bound for one search (the watchdog kills the engine after it)."""
        budget = base_s
        if self.time is not None:
            budget += 2 * self.time
        if self.nodes is not None:
            budget += self.nodes / 100_000  # ≥ 10x slower than Stockfish on one core
        if self.depth is not None:
            budget += 0.5 * self.depth
        return budget


@dataclass(frozen=True)
class Score:
    """A score from the side to move: centipawns or mate, and win/draw/loss per mille."""

    cp: int | None
    mate: int | None
    wdl: tuple[int, int, int] | None = None

    @property
    def value(self) -> int:
        """Centipawns with mates mapped to ±(MATE_CP - distance): sortable, comparable.

        >>> Score(cp=None, mate=2).value, Score(cp=None, mate=-1).value, Score(cp=35, mate=None).value
        (99998, -99999, 35)
        """
        if self.mate is not None:
            return MATE_CP - self.mate if self.mate > 0 else -MATE_CP - self.mate
        return int(self.cp or 0)

    @property
    def expected(self) -> float:
        """Expected score in [0, 1] for the side to move (from WDL when the engine gives it)."""
        if self.wdl is not None:
            win, draw, _ = self.wdl
            return (win + 0.5 * draw) / 1000.0
        return 1.0 / (1.0 + math.exp(-self.value / 400.0 * math.log(10)))

    @classmethod
    def from_pov(
        cls, pov: chess.engine.PovScore, wdl: chess.engine.PovWdl | None, turn: chess.Color
    ) -> Score:
        relative = pov.pov(turn)
        w = wdl.pov(turn) if wdl is not None else None
        return cls(
            cp=relative.score(),
            mate=relative.mate(),
            wdl=(w.wins, w.draws, w.losses) if w is not None else None,
        )


@dataclass(frozen=True)
class Line:
    """One principal variation: its first move, its score, the moves (UCI)."""

    move: str
    score: Score
    pv: tuple[str, ...]


@dataclass(frozen=True)
class Analysis:
    """The answer for one position: lines best first, or a terminal state (then no lines)."""

    fen: str
    lines: tuple[Line, ...]
    terminal: str | None = None  # "checkmate", "stalemate", ... when the game is over
    nodes: int = 0

    @property
    def best_move(self) -> str | None:
        return self.lines[0].move if self.lines else None

    @property
    def score(self) -> Score:
        if self.lines:
            return self.lines[0].score
        if self.terminal == "checkmate":
            return Score(cp=None, mate=0, wdl=(0, 0, 1000))  # the side to move is mated
        return Score(cp=0, mate=None, wdl=(0, 1000, 0))

    @property
    def pv(self) -> tuple[str, ...]:
        return self.lines[0].pv if self.lines else ()


@dataclass(frozen=True)
class Strength:
    """How strong ``play`` is: a Skill Level (0-20) or an Elo (UCI_Elo with UCI_LimitStrength)."""

    skill_level: int | None = None
    elo: int | None = None

    def __post_init__(self) -> None:
        if self.skill_level is not None and self.elo is not None:
            raise ValueError("give a skill level or an Elo, not both")
        if self.skill_level is not None and not 0 <= self.skill_level <= 20:
            raise ValueError(f"skill level must be 0..20, got {self.skill_level}")
        lo, hi = UCI_ELO_RANGE
        if self.elo is not None and not lo <= self.elo <= hi:
            raise ValueError(f"UCI_Elo must be {lo}..{hi} for Stockfish, got {self.elo}")

    def options(self) -> dict[str, Any]:
        if self.elo is not None:
            return {"UCI_LimitStrength": True, "UCI_Elo": self.elo}
        if self.skill_level is not None:
            return {"UCI_LimitStrength": False, "Skill Level": self.skill_level}
        return {"UCI_LimitStrength": False, "Skill Level": 20}

    def label(self) -> str:
        if self.elo is not None:
            return f"elo={self.elo}"
        if self.skill_level is not None:
            return f"skill={self.skill_level}"
        return "full"


# ---------------------------------------------------------------------------------------------
# positions


def _kill_pid(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def board_from(position: str | chess.Board, moves: Sequence[str] = ()) -> chess.Board:
    """A board from a FEN (or ``startpos``) plus UCI moves; InvalidPositionError if anything is bad.

    >>> board_from("startpos", ["e2e4", "e7e5"]).fen()
    'rnbqkbnr/pppp1ppp/8/4p3/4P3/8/PPPP1PPP/RNBQKBNR w KQkq - 0 2'
    """
    if isinstance(position, chess.Board):
        board = position.copy(stack=False)
    else:
        text = position.strip()
        try:
            board = chess.Board() if text in ("startpos", "") else chess.Board(text)
        except ValueError as exc:
            raise InvalidPositionError(f"invalid FEN {position!r}: {exc}") from None
        status = board.status()
        if status != chess.STATUS_VALID:
            raise InvalidPositionError(f"not a legal position: {position!r} ({_status_text(status)})")
    for uci in moves:
        try:
            move = chess.Move.from_uci(uci)
        except ValueError:
            raise InvalidPositionError(f"not a UCI move: {uci!r}") from None
        if move not in board.legal_moves:
            raise InvalidPositionError(f"illegal move {uci!r} in {board.fen()!r}")
        board.push(move)
    return board


def _status_text(status: chess.Status) -> str:
    names = [flag.name.lower() for flag in chess.Status if flag and flag in status and flag.name]
    return ", ".join(names) or "invalid"


def terminal_state(board: chess.Board) -> str | None:
    outcome = board.outcome(claim_draw=False)
    return outcome.termination.name.lower() if outcome is not None else None


# ---------------------------------------------------------------------------------------------
# one process


class UCIEngine:
    """One Stockfish process (:class:`chessrl.engine.uci.PipeEngine`) with a watchdog around every search.

    ``analyse`` and ``play`` restart the process and retry when it dies or hangs; bad input
    never reaches it (callers validate with :func:`board_from`).
    """

    def __init__(
        self,
        path: str | None = None,
        *,
        threads: int = 1,
        hash_mb: int = 16,
        timeout_s: float = 10.0,
        retries: int = 2,
        options: dict[str, Any] | None = None,
    ) -> None:
        self.path = find_stockfish(path)
        self.base_options: dict[str, Any] = {"Threads": threads, "Hash": hash_mb, **(options or {})}
        self.timeout_s = timeout_s
        self.retries = retries
        self.restarts = 0
        self._engine: PipeEngine | None = None
        self._current: dict[str, Any] = {}
        self._start()

    # -- lifecycle ------------------------------------------------------------------------------
    def _start(self) -> None:
        try:
            engine = PipeEngine(self.path)
        except OSError as exc:
            raise EngineError(f"cannot start {self.path}: {exc}") from None
        timer = threading.Timer(self.timeout_s, lambda: _kill_pid(engine.transport.get_pid()))
        timer.daemon = True
        timer.start()
        try:
            engine.handshake()
        except chess.engine.EngineError as exc:
            engine.close()
            raise EngineError(
                f"{self.path} did not answer the UCI handshake within {self.timeout_s:.0f}s: {exc}"
            ) from None
        finally:
            timer.cancel()
        engine.configure({k: v for k, v in self.base_options.items() if k in engine.options})
        self._engine = engine
        self._current = dict(self.base_options)

    @property
    def pid(self) -> int | None:
        return self._engine.transport.get_pid() if self._engine is not None else None

    def restart(self) -> None:
        self._kill()
        self.restarts += 1
        self._start()

    def _kill(self) -> None:
        engine, self._engine = self._engine, None
        if engine is None:
            return
        pid = engine.transport.get_pid()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(Exception):  # the loop may already be gone
            engine.close()

    def close(self) -> None:
        engine, self._engine = self._engine, None
        if engine is None:
            return
        try:
            engine.quit()
        except Exception:
            pid = engine.transport.get_pid()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        finally:
            with contextlib.suppress(Exception):
                engine.close()

    def __enter__(self) -> UCIEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- calls ----------------------------------------------------------------------------------
    def _call(self, fn: Any, deadline_s: float) -> Any:
        """Run ``fn(engine)`` under the watchdog; restart and retry on death or hang."""
        last: BaseException | None = None
        for attempt in range(self.retries + 1):
            if self._engine is None:
                self.restart()
            engine = self._engine
            assert engine is not None
            pid = engine.transport.get_pid()
            fired = threading.Event()

            def watchdog(pid: int = pid, fired: threading.Event = fired) -> None:
                fired.set()
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)

            timer = threading.Timer(deadline_s, watchdog)
            timer.daemon = True
            timer.start()
            try:
                return fn(engine)
            except (
                chess.engine.EngineTerminatedError,
                chess.engine.EngineError,
                TimeoutError,
                OSError,
            ) as exc:
                kind = f"hung (watchdog after {deadline_s:.1f}s)" if fired.is_set() else f"died ({exc})"
                last = EngineError(f"engine pid {pid} {kind}")
                self.restart()
            finally:
                timer.cancel()
            del attempt
        raise EngineError(f"engine failed {self.retries + 1} times: {last}")

    def _configure(self, engine: PipeEngine, wanted: dict[str, Any]) -> None:
        changed = {k: v for k, v in wanted.items() if self._current.get(k) != v and k in engine.options}
        if changed:
            engine.configure(changed)
            self._current.update(changed)

    def analyse(
        self, position: str | chess.Board, limit: SearchLimit, *, multipv: int = 1, fresh: bool = False
    ) -> Analysis:
        """The ``multipv`` best lines of ``position`` (a FEN, or a board whose move stack goes to
        the engine as the game so far), best first; a finished game is answered without the engine.
        ``fresh`` clears the hash first (reproducible).

        >>> with UCIEngine() as engine:  # doctest: +SKIP
        ...     a = engine.analyse(chess.Board(), SearchLimit(nodes=5_000), multipv=2)
        ...     [line.move for line in a.lines]
        ['d2d4', 'e2e4']
        """
        board = position if isinstance(position, chess.Board) else board_from(position)
        over = terminal_state(board)
        if over is not None:
            return Analysis(fen=board.fen(), lines=(), terminal=over)
        deadline = limit.deadline_s(self.timeout_s)

        def run(engine: PipeEngine) -> list[chess.engine.InfoDict]:
            self._configure(engine, {"UCI_ShowWDL": True, "UCI_LimitStrength": False, "Skill Level": 20})
            return engine.analyse(board, limit.to_chess(), multipv=multipv, game=object() if fresh else None)

        return infos_to_analysis(board, self._call(run, deadline))

    def check_strength(self, strength: Strength) -> None:
        """Raise UnsupportedOptionError when this Stockfish cannot play at ``strength``."""
        if strength.elo is None or self._engine is None:
            return
        spec = self._engine.options.get("UCI_Elo")
        if spec is None:
            raise UnsupportedOptionError(f"{self.path} has no UCI_Elo option; use a skill level")
        if spec.min is not None and spec.max is not None and not spec.min <= strength.elo <= spec.max:
            raise UnsupportedOptionError(
                f"{self.path} plays UCI_Elo {spec.min}..{spec.max}; {strength.elo} is outside that range"
            )

    def play(
        self,
        position: str | chess.Board,
        limit: SearchLimit,
        *,
        strength: Strength | None = None,
        fresh: bool = False,
    ) -> str:
        """The move (UCI) the engine plays in ``position`` (a FEN, or a board whose move stack goes
        to the engine as the game so far) at ``strength`` (full strength when None).

        >>> with UCIEngine() as engine:  # doctest: +SKIP
        ...     engine.play("6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1", SearchLimit(nodes=5_000))
        'd1d8'
        """
        board = position if isinstance(position, chess.Board) else board_from(position)
        wanted = Strength() if strength is None else strength
        self.check_strength(wanted)  # a bad option is the caller's mistake, not a dead engine
        deadline = limit.deadline_s(self.timeout_s)

        def run(engine: PipeEngine) -> str:
            self._configure(engine, wanted.options())
            result = engine.play(board, limit.to_chess(), game=object() if fresh else None)
            if result.move is None:
                raise EngineError(f"engine returned no move for {board.fen()!r}")
            return result.move.uci()

        return str(self._call(run, deadline))


def infos_to_analysis(board: chess.Board, infos: Sequence[chess.engine.InfoDict]) -> Analysis:
    lines = []
    nodes = 0
    for info in infos:
        pv = info.get("pv") or []
        score = info.get("score")
        if not pv or score is None:
            continue
        lines.append(
            Line(
                move=pv[0].uci(),
                score=Score.from_pov(score, info.get("wdl"), board.turn),
                pv=tuple(m.uci() for m in pv),
            )
        )
        nodes = max(nodes, int(info.get("nodes", 0) or 0))
    if not lines:
        raise EngineError(f"engine gave no principal variation for {board.fen()!r}")
    return Analysis(fen=board.fen(), lines=tuple(lines), nodes=nodes)
